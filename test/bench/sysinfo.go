package main

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
)

// sysInfo describes the machine a run happened on, for the header line.
type sysInfo struct {
	CPUs     int    // usable CPUs, as nproc prints
	MemTotal int64  // bytes; 0 if unknown
	CPUModel string // "" if unknown
	Kernel   string // "" if unknown
	FSType   string // file system of the data directory
	// LoadStart and LoadEnd are the 1-, 5- and 15-minute load averages
	// when the run started and when it ended ("" if unknown): a noisy
	// run shows.
	LoadStart, LoadEnd string
}

// loadAverage returns the load averages from /proc/loadavg, or "".
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// collectSysInfo gathers sysInfo, with dataDir being the directory the
// clusters keep their data in. Missing facts are left empty.
func collectSysInfo(dataDir string) sysInfo {
	si := sysInfo{CPUs: runtime.NumCPU(), FSType: fsType(dataDir), LoadEnd: loadAverage()}
	if f, err := os.Open("/proc/meminfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) >= 2 && fields[0] == "MemTotal:" {
				if kb, err := strconv.ParseInt(fields[1], 10, 64); err == nil {
					si.MemTotal = kb * 1024
				}
				break
			}
		}
		f.Close()
	}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				si.CPUModel = strings.Join(strings.Fields(v), " ")
				break
			}
		}
		f.Close()
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		si.Kernel = strings.TrimSpace(string(b))
	}
	return si
}

// fsType names the file system that holds dir, for the common Linux file
// systems; fsync costs nothing on tmpfs, so this matters for the numbers.
func fsType(dir string) string {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return "unknown"
	}
	names := map[int64]string{
		0xEF53:     "ext2/3/4",
		0x01021994: "tmpfs",
		0x58465342: "xfs",
		0x9123683E: "btrfs",
		0x794C7630: "overlayfs",
		0x2FC12FC1: "zfs",
		0x6969:     "nfs",
		0x65735546: "fuse",
	}
	if n, ok := names[int64(st.Type)]; ok {
		return n
	}
	return fmt.Sprintf("fs type %#x", st.Type)
}
