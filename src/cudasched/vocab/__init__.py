"""vocab"""
