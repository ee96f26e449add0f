"""Tests written from the survivors of the mutation run (docs/testing.md)."""
