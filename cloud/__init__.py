"""Emulated clouds for the test suite: storage emulators, job-service fakes and their runner.

Nothing here is product code. The fakes speak the services' real wire protocols so the product
is tested through the official clients; see docs/testing.md.

Layout: :mod:`cloud.sagemaker`, :mod:`cloud.vertex` and :mod:`cloud.azureml` are the fakes (each
package's docstring says where its parts live); :mod:`cloud.runner` really runs their jobs;
:mod:`cloud.fake_http` is the HTTP server, routing and ``/_fake/`` control API they share, and
:mod:`cloud.control` its client; :mod:`cloud.stack` starts and stops the whole stack
(``make cloud-up``), :mod:`cloud.serve` runs one fake for it, :mod:`cloud.gcs` the GCS
emulator with form uploads; :mod:`cloud.pytest_plugin` holds
the fixtures.
"""
