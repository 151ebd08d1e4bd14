"""One module per service: submit, find, describe, stream logs and stop a step's job."""
