"""Airflow hooks of the provider's own connection types."""
