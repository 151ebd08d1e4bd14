"""Worker side of artifacts: references in XCom, and object storage through Airflow connections."""
