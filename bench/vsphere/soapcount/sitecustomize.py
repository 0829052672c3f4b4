"""Counts pyvmomi SOAP round trips of one Python process (benchmarks only; put this folder on PYTHONPATH).

Every method call and property fetch of pyvmomi goes through SoapStubAdapter.InvokeMethod; at exit the count
is appended to the file named by BENCH_SOAP_CALLS_FILE. Used for our modules and the anchors alike.
"""

import atexit
import os

_PATH = os.environ.get("BENCH_SOAP_CALLS_FILE")

if _PATH:
    try:
        from pyVmomi import SoapAdapter
    except ImportError:
        SoapAdapter = None
    if SoapAdapter is not None:
        _calls = [0]
        _original = SoapAdapter.SoapStubAdapter.InvokeMethod

        def _counting(self, *args, **kwargs):
            _calls[0] += 1
            return _original(self, *args, **kwargs)

        SoapAdapter.SoapStubAdapter.InvokeMethod = _counting

        def _write():
            if _calls[0]:
                with open(_PATH, "a") as f:
                    f.write("%d\n" % _calls[0])

        atexit.register(_write)
