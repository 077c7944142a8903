"""operations.report"""
