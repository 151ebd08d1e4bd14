#!/usr/bin/env bash
# `make demo`: run the example DAG on the local backend with `airflow dags test`.
set -euo pipefail
cd "$(dirname "$0")/.."

export AIRFLOW_HOME=${AIRFLOW_HOME:-$PWD/.demo/airflow-home}
export AIRFLOW__CORE__DAGS_FOLDER=$PWD/dags_examples
export AIRFLOW__CORE__LOAD_EXAMPLES=False
AIRFLOW=.venv/bin/airflow

mkdir -p "$AIRFLOW_HOME"
$AIRFLOW db migrate >"$AIRFLOW_HOME/db-migrate.log" 2>&1
$AIRFLOW dags test stepop_train_pipeline 2>&1 | tee "$AIRFLOW_HOME/demo.log" \
  | grep -E "\[stepop|epoch|accuracy|model:|Submitted job|DagRun Finished|ERROR" || true

state=$(grep -o "state=[a-z]*" "$AIRFLOW_HOME/demo.log" | tail -1)
root=$AIRFLOW_HOME/stepop-artifacts/stepop_train_pipeline
echo
echo "Run finished with $state. Full log: $AIRFLOW_HOME/demo.log"
echo "Artifacts (specs, inputs, outputs, result manifests) are under:"
echo "  $root"
find "$root" -name result.json -printf "  %P\n" 2>/dev/null | sort | head -20
echo "and the code bundles under:"
echo "  $AIRFLOW_HOME/stepop-artifacts/code"
[[ "$state" == "state=success" ]]
