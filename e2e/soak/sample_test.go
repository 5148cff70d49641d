//go:build soak && linux

package soak

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
)

// figure is one line of the soak's table: what it measures, its value
// after the first tenth and at the end, and how much it may grow.
type figure struct {
	name string
	// first and end are the values; na marks a figure that could not be
	// read (the metric is absent).
	first, end float64
	na         bool
	// slack is the absolute growth allowed on top of the ratio, for
	// figures so small that a few more is noise (see flatRatio); info
	// marks a figure printed for reading, not asserted (the parts of a
	// total that is).
	slack float64
	info  bool
	unit  string
}

// flatRatio is how much an end figure may be above its first tenth: the
// figure after a tenth of the month must hold at the end (flat, not
// growing).
const flatRatio = 1.2

// Slacks: the absolute growth allowed on top of flatRatio, for tiny
// counts, where one more lock file, connection or DNS record is not a
// trend. Each is far below what 9/10 of the soak adds when something
// grows with the work (thousands of keys, instances, records).
const (
	slackKeys    = 50       // storage files or folders
	slackBytes   = 64 << 10 // storage bytes
	slackRecords = 20       // zone records
	slackHeap    = 8 << 20  // a Caddy's heap in use
	// A Caddy keeps a connection open to each upstream it proxied to
	// lately (reverse_proxy's keep-alive: a file and two goroutines
	// each), up to the window of 40 instances live at once, and which
	// Caddy served the deploys' latest checks is chance: a sample can
	// find one Caddy with none and the next with all 40.
	slackGoroutines = 50 + 2*40 // a Caddy's goroutines
	slackFDs        = 20 + 40   // a Caddy's open files
	slackCalls      = 10        // storage calls per second, the fleet's
)

// grew reports whether the end figure is past flatRatio times the first
// tenth and its slack.
func (f figure) grew() bool {
	return !f.na && !f.info && f.end > max(f.first*flatRatio, f.first+f.slack)
}

// sample is what the soak reads at one moment.
type sample struct {
	at                    time.Time
	files, dirs, bytes    float64
	areaFiles, areaBytes  map[string]float64 // by area of the storage (storageArea)
	zoneRecords           float64
	heap, goroutines, fds map[string]float64 // by Caddy slot
	calls                 float64            // the fleet's storage calls per second; -1: no metric
}

// storageArea is the part of the storage a key belongs to: the fleet's
// leases and switches, the DNS records' state, certificates, locks.
func storageArea(rel string) string {
	switch {
	case strings.HasPrefix(rel, "dicer/fleet/leases/"):
		return "leases"
	case strings.HasPrefix(rel, "dicer/fleet/switches/"):
		return "switches"
	case strings.HasPrefix(rel, "certificates/"):
		return "certificates"
	case strings.HasPrefix(rel, "locks/"):
		return "locks"
	default:
		return "other"
	}
}

var areas = []string{"leases", "switches", "certificates", "locks", "other"}

// walkStorage counts the storage folder's files, folders and bytes.
func walkStorage(root string, s *sample) {
	s.areaFiles, s.areaBytes = map[string]float64{}, map[string]float64{}
	_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // removed meanwhile
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if rel != "." {
				s.dirs++
			}
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		a := storageArea(filepath.ToSlash(rel))
		s.files++
		s.bytes += float64(info.Size())
		s.areaFiles[a]++
		s.areaBytes[a] += float64(info.Size())
		return nil
	})
}

// zoneRecords counts the zone's records by a TSIG-signed AXFR (-1 when
// the transfer fails).
func zoneRecords(b testkit.BIND) float64 {
	out, err := exec.Command("dig", "@"+b.Server, b.Zone, "AXFR", "-y", "hmac-sha256:"+b.KeyName+":"+b.Key,
		"+noall", "+answer", "+time=2", "+tries=1").Output()
	if err != nil {
		return -1
	}
	n := 0
	for _, line := range strings.Split(string(out), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, ";") {
			n++
		}
	}
	return float64(n - 1) // the SOA ends the transfer as it began it
}

// metricValue is the sum of metric's samples in a /metrics text, and
// whether there was any.
func metricValue(text, name string) (float64, bool) {
	sum, found := 0.0, false
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err == nil {
			sum, found = sum+v, true
		}
	}
	return sum, found
}

// openFiles is how many files the process has open, from /proc.
func openFiles(pid int) float64 {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return -1
	}
	return float64(len(ents))
}

// callsWindow is the window over which storage calls per second are
// counted.
const callsWindow = 5 * time.Second

// take samples the fleet; the caller keeps restarts and the outage away
// meanwhile.
func take(storage string, bind testkit.BIND, caddys []*fleetCaddy) sample {
	s := sample{at: time.Now(), heap: map[string]float64{}, goroutines: map[string]float64{}, fds: map[string]float64{}, calls: -1}
	walkStorage(storage, &s)
	s.zoneRecords = zoneRecords(bind)
	counter := func() (float64, bool) {
		sum, any := 0.0, false
		for _, p := range caddys {
			if v, ok := metricValue(p.metrics(), "caddy_dicer_fleet_storage_calls_total"); ok {
				sum, any = sum+v, true
			}
		}
		return sum, any
	}
	before, ok := counter()
	if ok {
		time.Sleep(callsWindow) // the rate's window: the counter is read at both ends
		if after, ok := counter(); ok {
			s.calls = (after - before) / callsWindow.Seconds()
		}
	}
	for _, p := range caddys {
		text := p.metrics()
		if v, ok := metricValue(text, "go_memstats_heap_inuse_bytes"); ok {
			s.heap[p.slot] = v
		}
		if v, ok := metricValue(text, "go_goroutines"); ok {
			s.goroutines[p.slot] = v
		}
		if v, ok := metricValue(text, "process_open_fds"); ok {
			s.fds[p.slot] = v
		} else {
			s.fds[p.slot] = openFiles(p.proc.Pid())
		}
	}
	return s
}

// figures pairs the two samples into the table's lines.
func figures(first, end sample, caddys []*fleetCaddy) []figure {
	fs := []figure{
		{name: "storage keys (files)", first: first.files, end: end.files, slack: slackKeys},
		{name: "storage folders", first: first.dirs, end: end.dirs, slack: slackKeys},
		{name: "storage bytes", first: first.bytes, end: end.bytes, slack: slackBytes, unit: "B"},
	}
	for _, a := range areas {
		fs = append(fs, figure{name: "  keys: " + a, first: first.areaFiles[a], end: end.areaFiles[a], info: true},
			figure{name: "  bytes: " + a, first: first.areaBytes[a], end: end.areaBytes[a], info: true, unit: "B"})
	}
	fs = append(fs, figure{name: "zone records (AXFR)", first: first.zoneRecords, end: end.zoneRecords, slack: slackRecords,
		na: first.zoneRecords < 0 || end.zoneRecords < 0})
	for _, p := range caddys {
		fs = append(fs,
			figure{name: "caddy " + p.slot + " heap in use", first: first.heap[p.slot], end: end.heap[p.slot], slack: slackHeap, unit: "B"},
			figure{name: "caddy " + p.slot + " goroutines", first: first.goroutines[p.slot], end: end.goroutines[p.slot], slack: slackGoroutines},
			figure{name: "caddy " + p.slot + " open files", first: first.fds[p.slot], end: end.fds[p.slot], slack: slackFDs})
	}
	fs = append(fs, figure{name: "storage calls/s (fleet)", first: first.calls, end: end.calls, slack: slackCalls,
		na: first.calls < 0 || end.calls < 0})
	return fs
}

// table prints the figures, one line each, with their verdict.
func table(fs []figure) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-28s %14s %14s %7s  %s\n", "figure", "first tenth", "end", "ratio", "verdict")
	for _, f := range fs {
		val := func(v float64) string {
			switch {
			case f.na:
				return "n/a"
			case f.unit == "B" && v >= 1<<20:
				return fmt.Sprintf("%.1f MiB", v/(1<<20))
			case f.unit == "B" && v >= 1<<10:
				return fmt.Sprintf("%.1f KiB", v/(1<<10))
			case v == float64(int64(v)):
				return strconv.FormatInt(int64(v), 10)
			default:
				return strconv.FormatFloat(v, 'f', 1, 64)
			}
		}
		ratio, verdict := "-", "flat"
		if !f.na && f.first > 0 {
			ratio = fmt.Sprintf("%.2f", f.end/f.first)
		}
		switch {
		case f.na:
			verdict = "n/a"
		case f.info:
			verdict = "(part of the above)"
		case f.grew():
			verdict = fmt.Sprintf("GREW (limit %s)", val(max(f.first*flatRatio, f.first+f.slack)))
		}
		fmt.Fprintf(&b, "%-28s %14s %14s %7s  %s\n", f.name, val(f.first), val(f.end), ratio, verdict)
	}
	return b.String()
}
