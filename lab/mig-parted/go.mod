module gpuops.lab/mig-parted

go 1.26.0

// NVIDIA's nvidia-mig-parted, as a test oracle for mig-parted v1 config documents (`assert --valid-config` parses and
// validates a config without NVML). v0.10.0 is the newest version the Go module proxy serves here (v0.11.0 and later
// answer 403).
tool github.com/NVIDIA/mig-parted/cmd/nvidia-mig-parted

require (
	github.com/NVIDIA/go-nvlib v0.7.0 // indirect
	github.com/NVIDIA/go-nvml v0.12.4-0 // indirect
	github.com/NVIDIA/mig-parted v0.10.0 // indirect
	github.com/cpuguy83/go-md2man/v2 v2.0.5 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/russross/blackfriday/v2 v2.1.0 // indirect
	github.com/sirupsen/logrus v1.9.3 // indirect
	github.com/urfave/cli/v2 v2.27.5 // indirect
	github.com/xrash/smetrics v0.0.0-20240521201337-686a1a2994c1 // indirect
	golang.org/x/sys v0.21.0 // indirect
	gopkg.in/yaml.v2 v2.4.0 // indirect
	sigs.k8s.io/yaml v1.4.0 // indirect
)
