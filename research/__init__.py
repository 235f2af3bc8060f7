"""The project's studies: one folder per question, each with its page, scripts and compact data (see README.md)."""
