"""Revisions of the relational store's schema, oldest first."""
