"""Tasks beyond the built-in ones in data.py."""
