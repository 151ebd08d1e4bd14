"""Emulated clouds for the test suite: storage emulators, job-service fakes and their runner.

Nothing here is product code. The fakes speak the services' real wire protocols so the product
is tested through the official clients; see docs/testing.md.
"""
