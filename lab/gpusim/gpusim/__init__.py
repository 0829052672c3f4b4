"""gpusim: NVML stand-in for the gpuops.provision lab (see lab/gpusim/README.md)."""
