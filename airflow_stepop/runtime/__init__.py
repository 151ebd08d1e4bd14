"""The step runtime: runs inside the job, on any image with a Python interpreter.

Everything in this package is standard library only (numpy, pandas, pyarrow, cloudpickle and
fsspec are imported lazily, and only when a step's own values need them). It imports nothing
from Airflow, nothing from the rest of airflow_stepop and no cloud SDK: the code bundle carries
this package to the job, so the image needs nothing of ours.
"""
