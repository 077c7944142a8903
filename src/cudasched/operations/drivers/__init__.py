"""operations.drivers"""
