"""The Kubernetes fake: an API server whose batch/v1 Jobs really run, for the official clients.

Where each part lives:

* :mod:`~cloud.kubernetes.server`: the fake (bearer auth, ``Status`` errors, reset) and its
  entry points ``serve`` (the stack's), ``start`` (tests), ``stack_env`` and ``main``
  (``python -m cloud.kubernetes``); its docstring lists what it serves and its gaps;
* the API: :mod:`~cloud.kubernetes.jobs` (Jobs), :mod:`~cloud.kubernetes.pods` (pods and their
  logs), :mod:`~cloud.kubernetes.core` (namespaces, nodes, events, Secrets, Services),
  :mod:`~cloud.kubernetes.discovery`, :mod:`~cloud.kubernetes.reads` (list, get) and
  :mod:`~cloud.kubernetes.watch`, :mod:`~cloud.kubernetes.deletion` (propagation and the
  garbage collector), :mod:`~cloud.kubernetes.patching`, :mod:`~cloud.kubernetes.validation`,
  :mod:`~cloud.kubernetes.selectors`, :mod:`~cloud.kubernetes.api` (kinds, errors, times);
* the cluster: :mod:`~cloud.kubernetes.cluster` (the control loop and the scheduling pass),
  :mod:`~cloud.kubernetes.jobcontroller`, :mod:`~cloud.kubernetes.scheduler`,
  :mod:`~cloud.kubernetes.kubelet` and :mod:`~cloud.kubernetes.termination` (running a pod),
  :mod:`~cloud.kubernetes.podenv` (its environment and volumes), :mod:`~cloud.kubernetes.logs`,
  :mod:`~cloud.kubernetes.kueue`, :mod:`~cloud.kubernetes.nodes`,
  :mod:`~cloud.kubernetes.events`;
* state: :mod:`~cloud.kubernetes.state` (settings, tables) and :mod:`~cloud.kubernetes.store`
  (objects, resourceVersions, history); :mod:`~cloud.kubernetes.control` (the fake's own
  ``/_fake/`` paths); helpers :mod:`~cloud.kubernetes.conditions`,
  :mod:`~cloud.kubernetes.podspec`, :mod:`~cloud.kubernetes.quantities`.
"""

from cloud.kubernetes.server import KubernetesFake, kubeconfig, main, serve, stack_env, start

__all__ = ["KubernetesFake", "kubeconfig", "main", "serve", "stack_env", "start"]
