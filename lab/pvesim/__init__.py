"""pvesim: a Proxmox VE API simulator for the gpuops.provision lab (HTTPS on loopback, own CA).

Import as ``pvesim`` with ``lab/`` on ``sys.path``; ``pvesim.harness.running_pvesim`` starts one for a test.
"""
