"""Protocol buffer schemas and their generated modules (see README.md)."""
