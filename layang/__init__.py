"""Layang: a transactional email service."""

__version__ = "0.1.0"
