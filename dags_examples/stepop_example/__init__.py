"""Plain ML code used by the example DAG: no Airflow imports, so steps import it by name."""
