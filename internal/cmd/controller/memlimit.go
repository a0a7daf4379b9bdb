package controller

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/go-logr/logr"
)

// cgroupRoot is where a container sees its own cgroup: with cgroup v2 (and
// a cgroup namespace, the container runtimes' default) its memory.max is
// the container's memory limit; with v1 the runtimes mount the container's
// memory cgroup at memory/.
const cgroupRoot = "/sys/fs/cgroup"

// memoryLimitPercent of the container's memory limit is the Go runtime's
// soft limit: the garbage collector works harder as the heap nears it, so
// a peak is collected before the kernel kills the container, and what is
// left covers memory the runtime does not count: the executable's pages
// (its code and read-only data, once touched: 55 MiB of a data-plane
// replica's 516 MiB peak RSS at 10,000 Services, with 90 % of the chart's
// 512Mi, charts/zerodrop/README.md), thread stacks outside the Go heap,
// memory not yet returned to the OS.
const memoryLimitPercent = 85

// unlimitedV1 is where cgroup v1 reports no limit: its "unlimited" is the
// largest int64 rounded down to a page (9223372036854771712 with 4 KiB
// pages); no container has a limit of exabytes.
const unlimitedV1 = 1 << 62

// setMemoryLimit sets the Go runtime's soft memory limit
// (runtime/debug.SetMemoryLimit) to memoryLimitPercent of the memory limit
// of the cgroup under root — v2 memory.max, else v1
// memory/memory.limit_in_bytes — unless GOMEMLIMIT is set in the
// environment (the runtime has read it: the user's choice wins). No limit
// ("max", v1's unlimited, no file) leaves the runtime's limit as it is. It
// logs one line saying which.
func setMemoryLimit(log logr.Logger, root string) {
	if v := os.Getenv("GOMEMLIMIT"); v != "" {
		log.Info("GOMEMLIMIT is set in the environment; the container's memory limit is not read", "GOMEMLIMIT", v)
		return
	}
	limit, file, err := cgroupMemoryLimit(root)
	switch {
	case err != nil:
		log.Error(err, "reading the container's memory limit; GOMEMLIMIT left unset")
	case limit <= 0:
		log.Info("no container memory limit; GOMEMLIMIT left unset", "cgroup", root)
	default:
		soft := GoMemoryLimit(limit)
		debug.SetMemoryLimit(soft)
		log.Info(fmt.Sprintf("GOMEMLIMIT set to %d %% of the container's memory limit", memoryLimitPercent),
			"memoryLimit", limit, "GOMEMLIMIT", soft, "from", file)
	}
}

// GoMemoryLimit is the Go runtime's soft memory limit the controller sets
// in a container whose memory limit is limit bytes: memoryLimitPercent of
// it. hack/procmem passes it as GOMEMLIMIT to a controller it runs in a
// memory cgroup without a cgroup namespace, where the controller would read
// the host's root cgroup instead of its own.
func GoMemoryLimit(limit int64) int64 {
	return limit/100*memoryLimitPercent + limit%100*memoryLimitPercent/100
}

// cgroupMemoryLimit reads the memory limit of the cgroup under root and the
// file it came from; 0 when there is none.
func cgroupMemoryLimit(root string) (int64, string, error) {
	for _, name := range []string{"memory.max", filepath.Join("memory", "memory.limit_in_bytes")} {
		file := filepath.Join(root, name)
		b, err := os.ReadFile(file)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return 0, file, err
		}
		s := strings.TrimSpace(string(b))
		if s == "max" {
			return 0, file, nil
		}
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, file, fmt.Errorf("%s: %w", file, err)
		}
		if v >= unlimitedV1 {
			return 0, file, nil
		}
		return v, file, nil
	}
	return 0, "", nil
}
