"""Prompt templates for the LLM mutation operator (plain text files)."""
