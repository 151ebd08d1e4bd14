"""`python -m airflow_stepop.runtime SPEC_URI`: run one step described by a step spec."""

import sys

from airflow_stepop.runtime.main import main

sys.exit(main())
