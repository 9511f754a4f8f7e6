package main

import (
	"flag"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestFlagsAndValidate(t *testing.T) {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	cfg := registerFlags(fs)
	if err := fs.Parse([]string{"-targets=etcd", "-writers=1, 8", "-sizes=100", "-experiments=latency"}); err != nil {
		t.Fatal(err)
	}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	if strings.Join(cfg.Targets, ",") != "etcd" || len(cfg.Writers) != 2 || cfg.Writers[1] != 8 || cfg.Sizes[0] != 100 {
		t.Errorf("cfg = %+v", cfg)
	}
	for _, args := range [][]string{
		{"-targets=nope"},
		{"-experiments=nope"},
		{"-writers=0"},
		{"-duration=0"},
	} {
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		cfg := registerFlags(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		if err := cfg.validate(); err == nil {
			t.Errorf("%v: no validation error", args)
		}
	}
	fs = flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(new(strings.Builder))
	registerFlags(fs)
	if err := fs.Parse([]string{"-writers=x"}); err == nil {
		t.Error("-writers=x parsed")
	}
}

func TestHeaderAndCommandLine(t *testing.T) {
	if got := commandLine([]string{"/tmp/go-build123/b001/exe/bench", "-targets=etcd"}); got != "go run ./test/bench -targets=etcd" {
		t.Errorf("commandLine = %q", got)
	}
	if got := commandLine([]string{"/somewhere/bin/bench"}); got != "bench" {
		t.Errorf("commandLine = %q", got)
	}
	h := headerLine(time.Date(2024, 5, 6, 7, 8, 0, 0, time.UTC),
		sysInfo{CPUs: 2, MemTotal: 24 << 30, CPUModel: "CPU X", Kernel: "6.1", FSType: "ext2/3/4", LoadStart: "0.10 0.20 0.30", LoadEnd: "1.50 0.60 0.40"}, "bench -x")
	for _, want := range []string{"Run 2024-05-06 07:08 UTC", "nproc 2", "memory 24 GiB", "CPU X", "Linux 6.1", "data on ext2/3/4", "load average (1, 5, 15 min) 0.10 0.20 0.30 at the start, 1.50 0.60 0.40 at the end", "command: `bench -x`"} {
		if !strings.Contains(h, want) {
			t.Errorf("header %q lacks %q", h, want)
		}
	}
	if si := collectSysInfo(t.TempDir()); si.CPUs < 1 || si.FSType == "" || len(strings.Fields(si.LoadEnd)) != 3 {
		t.Errorf("collectSysInfo = %+v", si)
	}
}

func TestShortErr(t *testing.T) {
	long := strings.Repeat("a", 300)
	if got := shortErr(errString("x\n  y")); got != "x y" {
		t.Errorf("shortErr = %q", got)
	}
	if got := shortErr(errString(long)); len(got) != 160 || !strings.HasSuffix(got, "...") {
		t.Errorf("shortErr of a long error has length %d", len(got))
	}
}

type errString string

func (e errString) Error() string { return string(e) }

func TestSoakOnlyWhenNamed(t *testing.T) {
	cfg := registerFlags(flag.NewFlagSet("test", flag.ContinueOnError))
	for _, k := range []string{"latency", "pause", "reads", "extra"} {
		if !slices.Contains(cfg.Experiments, k) {
			t.Errorf("%s does not run by default", k)
		}
	}
	if slices.Contains(cfg.Experiments, "soak") {
		t.Error("the soak runs by default")
	}
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	cfg = registerFlags(fs)
	if err := fs.Parse([]string{"-experiments=soak"}); err != nil {
		t.Fatal(err)
	}
	if err := cfg.validate(); err != nil || !slices.Equal(cfg.Experiments, []string{"soak"}) {
		t.Errorf("-experiments=soak: %v, %v", cfg.Experiments, err)
	}
}
