package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// TestDocFigures keeps every measured figure in the documentation next to
// the command that measured it and the commit it was measured at, so a
// figure that nobody can reproduce, or that dates from code long gone, is
// visible. The convention (docs/README.md, "Figures"):
//
//	<!-- figure -->
//	Measured with `make bench BENCH_RUN=Scale BENCH_SCALE_N=300` at commit `0123abc`.
//
//	| load balancers | restart |
//	|---|---|
//	| 300 | 0.5 s |
//
//	<!-- /figure -->
//
// Between `<!-- figure -->` and `<!-- /figure -->` (each alone on its line)
// numbers with units are free; the block must say `Measured with` (or
// `measured with`) followed by the command in a code span, and `commit` (or
// `commits`) followed by the commit in a code span (7 to 40 hex digits,
// each a commit of this repository when the history is at hand); in the
// benches' documents (flagsDocs) it also quotes the bench's "flags changed
// from the shipped defaults: …" line. Outside figure blocks a number with a unit (time,
// size, percentage, a count of requests, a rate) fails unless it is in a
// code span or code block (flag defaults, configuration values, commands),
// in a generated reference (docs/flags.md, ...), or allow-listed below with
// the reason it is not a measurement.
func TestDocFigures(t *testing.T) {
	root := filepath.Join("..", "..")
	var files []string
	for _, pattern := range []string{"README.md", "docs/*.md", "docs/rules/*.md", "charts/zerodrop/README.md"} {
		m, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	sort.Strings(files)
	used := map[string]bool{}
	for _, path := range files {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.ToSlash(strings.TrimPrefix(path, root+string(filepath.Separator)))
		res := scanFigures(name, string(data))
		for _, b := range res.blocks {
			if b.err != "" {
				t.Errorf("%s:%d: figure block: %s", name, b.line, b.err)
				continue
			}
			checkCommit(t, name, b)
			if flagsDocs[name] && !b.flags {
				t.Errorf("%s:%d: figure block: no %q line: quote the one the bench (or hack/procmem) printed, or say what its code at the commit passed (internal/bench.FlagsChanged)", name, b.line, "Flags changed from the shipped defaults: …")
			}
		}
		for _, f := range res.loose {
			if keys := allowedFigure(name, f); len(keys) > 0 {
				for _, k := range keys {
					used[k] = true
				}
				continue
			}
			t.Errorf("%s:%d: %q outside a figure block: put it in one with its command and commit (docs/README.md, \"Figures\"), drop it, or allow-list it with the reason it is not a measurement\n\t%s", name, f.line, f.match, strings.TrimSpace(f.text))
		}
	}
	for _, a := range figureAllowList {
		for _, p := range a.phrases {
			if !used[a.file+"\x00"+p] {
				t.Errorf("allow-list: %s: %q matches no figure: remove it", a.file, p)
			}
		}
	}
}

// allowed lists numbers with units in one file's prose that are not
// measurements (defaults, configuration values, documented limits, worked
// examples), with the reason. Each phrase is a piece of one line of the
// file, as written (code spans included), holding the number and its unit;
// a phrase that no longer matches fails, so the list does not outlive the
// text.
type allowed struct {
	file, reason string
	phrases      []string
}

var figureAllowList = []allowed{
	{"README.md", "limits, defaults and configuration values (the drain calls held, the recipe's grace period, kube-proxy's default, the annotation's range, the chaos faults injected)", []string{
		"at most 512 calls are held per source address and 4,096 in all", "grace 60 s", "`--min-sync-period` (1 s)", "(100ms–1m)",
		"kube-apiserver stopped for 30 s", "20 % of ARM requests failing",
	}},
	{"charts/zerodrop/README.md", "limits and cache lifetimes of the code", []string{
		"at most 64 connections", "within 10 s, when", "within 2 s, at most 16 connections per source", "verb for 2 minutes, a refused token or a denied request for 10 seconds",
		"two reviews every 2 minutes", "for up to 2 minutes", "for up to 10 seconds more", "not scraped for 5 minutes",
		"`GOMEMLIMIT` to 85 % of it",
	}},
	{"docs/check.md", "Kubernetes' and the providers' documented defaults, and the analyzer's profiles computed from them (docs/rules/timings.md gives the sources)", []string{
		"`maxUnavailable` of 25 %", "`maxUnavailable` 25 %", "the 30 s default", "| generic (conservative) | 35 s | 35 s |",
		"| azure | 15 s | 15 s |", "| aws | 35 s | 35 s; 305 s with IP targets (300 s deregistration delay) |",
		"| gke | 13 s / 8 s | 29 s / 11 s", "| haproxy | 9 s | 11 s |", "propagation allowance (5 s)",
	}},
	{"docs/design.md", "limits, defaults, timeouts and lifetimes of the code and the API, an example clock skew, and invariant 1 (no write)", []string{
		"the API's 1,024 bytes", "budget (5 s,", "`GOMEMLIMIT` at start to 85 % of the limit", "(at least 10 s after it stops)", "`--kube-proxy-sync-margin` (2 s)",
		"`--min-sync-period` (1 s)", "`--kube-proxy-fallback-delay` (10 s)", "a node 40 s behind", "0 writes on a restart",
		"each read bounded (5 s)", "lives 24 h", "up to 8 h", "for 25 h", "read timeout 10 s", "write 30 s, idle 60 s, 8 KiB of",
		"(30 s bound)",
		// The state endpoint's limits and the certificate's recovery bounds
		// (issue 46), and the threat model's limits and a test's input.
		"renews, within 2 minutes (below)", "reaches the replicas within 2 minutes", "reads it every 30 s",
		"that is under 2 minutes from", "normal renewal (up to 16 h)", "handshake itself, within 2 s",
		"at most 16 connections may be handshaking", "handshake 2 s of its 5 s read", "at most 8 MiB (twice the",
		"share 32 MiB, so", "well within 2 minutes once a signer runs", "a certificate of it within 2 minutes",
		"each TLS handshake is bounded (2 s), at most 16 connections may be handshaking", "`TestGateOpensDuringFlood`: 1,000 connections",
		"within its unflooded time plus 2 s", "one answer is capped at 8 MiB", "all answers in flight share 32 MiB",
		"for up to the cache's 2 minutes", "(4,096 calls, 256 lookups", "polled every 500 ms", "up to 5 s (`TestFlooded",
		"gate by less than 5 s", "every 500 ms until it has waited 5 s", "T/10 + 500 ms later (at most 5 s)", "It is cut to 5 minutes", "`ReadBatchWindow` (250 ms)", "within 10 s of the hook's call", "one read bound (5 s)",
	}},
	{"docs/haproxy.md", "intervals, timeouts and retries of the code, HAProxy's and Linux's defaults, a test's input", []string{
		"checks every 2 s", "the 10 s command timeout", "1 s is Linux's initial SYN", "sends 6 connections",
		"(inter 2000 ms, rise 2, fall 3)", "retried every 50 ms for up to 3 s", "(every 20 ms", "inter 2 s and rise 2, up to about 4 s",
		"`--retry-period`, 2 s) and gives up only after `--renew-deadline` (10 s)", "`--lease-duration` (15 s)",
		"after at least 10 s", "once past 16 MiB",
	}},
	{"docs/lab-network.md", "the lab's stop timeout", []string{"SIGKILL after 10 s"}},
	{"docs/webhook.md", "intervals, timeouts and lifetimes of the code, the API server's webhook timeout, HAProxy's connect timeout", []string{
		"every 250 ms", "within 10 s of", "its request (10 s) or idle between requests (5 s)", "answer (10 s)",
		"`--max-wait` plus 2 s", "the serving certificate 90 days", "overlap 5 minutes", "webhook slower than 5 s",
		"one 1 s connect timeout",
		// The relay's container limit and read timeout, the drain endpoint's caps (issue 46).
		"container has 64 MiB", "closes them after 10 s anyway", "holds at most 512 calls at once", "each held `CacheLag` (5 s)",
	}},
	{"docs/rules/ZD105.md", "a worked example of the rule's arithmetic", []string{"periodSeconds 10 × (failureThreshold", "= 50 s ≤ readiness"}},
	{"docs/rules/ZD201.md", "the providers' documented defaults (docs/rules/timings.md)", []string{"e.g. Azure 15 s, AWS NLB 305 s"}},
	{"docs/rules/ZD202.md", "AWS's documented default deregistration delay", []string{"delay of 300 s"}},
	{"docs/rules/ZD203.md", "Kubernetes' and AWS's documented behaviour and defaults", []string{"one-off 2 s extension", "default 300 s deregistration delay"}},
	{"docs/rules/ZD204.md", "a worked example of the rule's arithmetic", []string{"`sleep 10 + 10 s × (3 − 1) = 30 s < 35 s deregistration`: the pod may stop serving 5 s early"}},
	{"docs/rules/ZD205.md", "Kubernetes' documented defaults", []string{"default of 30 s", "shortened. 30 s or more", "minimum shutdown window of 2 s"}},
	{"docs/rules/ZD301.md", "Kubernetes' documented defaults", []string{"**25 %** for Deployments", "the default 25 % of up to 3 replicas"}},
	{"docs/rules/timings.md", "the providers' and Kubernetes' documented defaults (sources at the end of the page) and the analyzer's allowance and profiles computed from them", []string{
		"allowance of 5 s",
		"| `generic` | 10 s | 3 | 3 | – | 35 s | 35 s |",
		"| `azure` | 5 s | 2 | 2 | – | 15 s | 15 s |",
		"| `aws`, instance targets | 10 s | 3 | 3 | – | 35 s | 35 s |",
		"| `aws`, IP targets | 10 s | 3 | 3 | 300 s | 35 s | 305 s |",
		"| `gke`, externalTrafficPolicy Cluster | 8 s | 1 | 3 | – | 13 s | 29 s |",
		"| `gke`, externalTrafficPolicy Local | 3 s | 1 | 2 | – | 8 s | 11 s |",
		"| `haproxy` | 2 s | 2 (rise) | 3 (fall) | – | 9 s | 11 s |",
		"NLB's 10 s interval", "with a 5 s interval", "with a 10 s interval", "target for 300 s", "(8 s interval",
		"for Local (3 s", "checks every 2 s", "down after 3 failures", "default grace period of 30 s", "one-off 2 s",
		"default to 25 %", "(default 300 s)", "default 2000 ms",
	}},
	{"docs/scale.md", "the machine's memory: not measured", []string{
		"24 GiB of memory",
	}},
	{"docs/lab.md", "the lab's configuration (intervals, timeouts, durations, schedules and bounds of its agents, scenarios and clients) and the defaults it copies from Kubernetes, cloud-provider-azure and HAProxy", []string{
		"heartbeats every 10 s", "for up to 2 s", "endpoint every 250 ms", "(period 10 s, failure threshold 3)",
		"duration 15 s, renew deadline 10 s, retry 2 s", "| probe every 5 s", "`timeout client`/`server` 4 min",
		"defaults (25 % / 25 %)", "two failing ones 5 s apart", "idle (120 s", "back-off (10 s, doubling", "at most 5 min)",
		"the route is withdrawn 3 s", "runs traffic for 2 s", "from 5 s to 2 s ago", "2 s after it was sent), runs traffic 2 s more",
		"fails: 120 s, and in recipe mode 40 s more", "`restart-idle` 40 s more", "`kill-mid-plan` 60 s more per kill", "the outage and 90 s more",
		"ready, and 5 s more", "the next restart 2 s after", "for 15 s, scale every 1.5 s", "changes every 2 s",
		"and 5 s later", "to 5 s after the", "withdrawn 3 s later", "BFD with a 1 s interval",
		"(default 30 s, longer", "the 15 s lease", "and 5 s more. `ch", "the 250 ms samples", "2.5 × rate",
		"its whole 2 s timeout", "**100 ms after its slot**", "more than 100 ms late", "Timeout 2 s for the whole request",
		"answer in 2 s)", "its 1 s turn-around", "within the 2 s", "Every 200 ms a", "2 s or is not the message sent",
		"tries again 200 ms", "stop for over 100 ms", "any 250 ms sample", "250 ms samples of HAProxy's state",
		"every 250 ms.", "its default 15 s lease", "(default 5 min;", "resyncs every 100 s",
		"every 50 ms", "every 500 ms", "default 1 s,", "wait 2 s)",
		"than 100 ms after its slot", "at most 10 minutes", "the lab's 2 s timeout",
	}},
	{"docs/azure.md", "Azure's documented limits and rule settings", []string{
		"idle timeout 4 min", "runs as 5 s", "= 3 failures", "probe interval ≥ 5 s",
	}},
	{"docs/azure.md", "the controller's defaults and configuration values (flags, cache age, drain budget, the lab's lease and fault rate, the SDK's polling)", []string{
		"younger than 1 s", "(default 10 s; at most 5 minutes", "(default 30 s", "(default 5 min)", "`--retry-period`, 2 s)",
		"`--renew-deadline` (10 s)", "`--lease-duration` (15 s)", "budget (5 s,",
		"| 20 % injected faults", "its default 15 s lease). Besides",
		"(the emulator's is 10 ms unless set; ARM's network provider sends 10 s)",
	}},
}

// allowedFigure reports the allow-list phrases that cover a figure.
func allowedFigure(file string, f looseFigure) []string {
	var keys []string
	for _, a := range figureAllowList {
		if a.file != file {
			continue
		}
		for _, p := range a.phrases {
			if strings.Contains(f.text, p) && strings.Contains(p, f.match) {
				keys = append(keys, file+"\x00"+p)
			}
		}
	}
	return keys
}

type figureBlock struct {
	line    int
	command string
	commits []string
	// flags: the block quotes a bench's flags line (flagsRE).
	flags bool
	err   string
}

// flagsDocs hold the benches' and hack/procmem's figures: each of their
// figure blocks quotes the line the bench prints beside its figures
// (internal/bench.FlagsLine), so that what a figure was measured with,
// against what a user runs, is beside it (issue 49).
var flagsDocs = map[string]bool{"docs/scale.md": true, "charts/zerodrop/README.md": true}

type looseFigure struct {
	line        int
	match, text string
}

type figureScan struct {
	blocks []figureBlock
	loose  []looseFigure
}

var (
	// A number (digits, thousands commas, decimals, ½, a range such as
	// 3.4–7.3) and its unit: a duration, a size, a percentage, a factor,
	// a count of requests (or calls, connections, reads, writes, failures,
	// errors, runs) or a rate (anything per second). A one-letter unit
	// (s, h, B) needs the space before it: 412s are HTTP answers.
	figureRE = regexp.MustCompile(`(?:^|[^\w.,/-])(\d[\d,]*(?:\.\d+)?½?(?:\s?[–-]\s?\d[\d,]*(?:\.\d+)?½?)?)` +
		`(?:(\s|\x{a0})(s|h|B)\b|(\s|\x{a0})?(%|×|(?:ns|µs|us|ms|sec|seconds?|min|minutes?|hours?|days?|` +
		`KiB|MiB|GiB|KB|kB|MB|GB|bytes|requests?|connections?|calls|reads|writes|failures|errors|runs|[A-Za-z]+/s)\b))`)
	codeSpanRE = regexp.MustCompile("(`+)[^`]*?(?:`+)")
	commentRE  = regexp.MustCompile(`<!--.*?-->`)
	linkDestRE = regexp.MustCompile(`\]\([^)]*\)`)
	measuredRE = regexp.MustCompile("[Mm]easured with\\s+`([^`]+)`")
	commitRE   = regexp.MustCompile("commits?\\s+`([0-9a-f]{7,40})`")
	// The benches' line, wrapped anywhere in the Markdown source.
	flagsRE      = regexp.MustCompile(`(?i)flags\s+changed\s+from\s+the\s+shipped\s+defaults:`)
	generatedDoc = "<!-- Generated by `make docs`"
)

const (
	figureOpen  = "<!-- figure -->"
	figureClose = "<!-- /figure -->"
)

func scanFigures(name, doc string) figureScan {
	var res figureScan
	if strings.Contains(doc, generatedDoc) {
		return res // generated from the code: defaults, not measurements
	}
	lines := strings.Split(doc, "\n")
	var fence string
	inBlock := false
	var block figureBlock
	var blockText strings.Builder
	for i, raw := range lines {
		n := i + 1
		trimmed := strings.TrimSpace(raw)
		// Fenced code blocks (commands, configuration, examples of this
		// convention) are not prose.
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			if inBlock {
				blockText.WriteString(raw + "\n")
			}
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fence = trimmed[:3]
			if inBlock {
				blockText.WriteString(raw + "\n")
			}
			continue
		}
		switch trimmed {
		case figureOpen:
			if inBlock {
				res.blocks = append(res.blocks, figureBlock{line: n, err: "opened inside another figure block"})
			}
			inBlock, block = true, figureBlock{line: n}
			blockText.Reset()
			continue
		case figureClose:
			if !inBlock {
				res.blocks = append(res.blocks, figureBlock{line: n, err: "closed without being opened"})
				continue
			}
			inBlock = false
			res.blocks = append(res.blocks, closeBlock(block, blockText.String()))
			continue
		}
		if inBlock {
			blockText.WriteString(raw + "\n")
			continue
		}
		text := codeSpanRE.ReplaceAllString(raw, "` `")
		text = commentRE.ReplaceAllString(text, "")
		text = linkDestRE.ReplaceAllString(text, "]")
		for _, m := range figureRE.FindAllStringSubmatch(text, -1) {
			res.loose = append(res.loose, looseFigure{line: n, match: m[1] + m[2] + m[3] + m[4] + m[5], text: raw})
		}
	}
	if inBlock {
		res.blocks = append(res.blocks, figureBlock{line: block.line, err: "not closed (" + figureClose + ")"})
	}
	return res
}

// closeBlock checks a figure block's text for its command and commit.
func closeBlock(b figureBlock, text string) figureBlock {
	if m := measuredRE.FindStringSubmatch(text); m != nil {
		b.command = m[1]
	}
	for _, m := range commitRE.FindAllStringSubmatch(text, -1) {
		b.commits = append(b.commits, m[1])
	}
	b.flags = flagsRE.MatchString(text)
	switch {
	case b.command == "" && len(b.commits) == 0:
		b.err = "no \"Measured with `command`\" and no \"commit `hash`\""
	case b.command == "":
		b.err = "no \"Measured with `command`\""
	case len(b.commits) == 0:
		b.err = "no \"commit `hash`\""
	}
	return b
}

// checkCommit looks the block's commits up in the repository's history when
// git and the history are at hand (a shallow clone may not have it).
func checkCommit(t *testing.T, file string, b figureBlock) {
	t.Helper()
	git, err := exec.LookPath("git")
	if err != nil {
		return
	}
	if out, err := exec.Command(git, "rev-parse", "--is-shallow-repository").Output(); err != nil || strings.TrimSpace(string(out)) != "false" {
		return
	}
	for _, c := range b.commits {
		if err := exec.Command(git, "cat-file", "-e", c+"^{commit}").Run(); err != nil {
			t.Errorf("%s:%d: figure block: commit %s is not in this repository's history", file, b.line, c)
		}
	}
}

// TestDocFiguresScan checks the scanner on a small document.
func TestDocFiguresScan(t *testing.T) {
	doc := "Restarts take 3.4 s here.\n" +
		"A `--timeout=30s` flag, 412s from ARM.\n" +
		"```\nsleep 30 s\n```\n" +
		figureOpen + "\n" +
		"Measured with `make bench` at commit `0123abc`.\n\n" +
		"| 5,000 | 7.3 s |\n" +
		figureClose + "\n" +
		figureOpen + "\n" +
		"Restarts take 2 min.\n" +
		figureClose + "\n" +
		"Between 3.4–7.3 s, 20 % of 1,000 requests at 5 docs/s, 2.8 GB, 5½ min.\n"
	res := scanFigures("x.md", doc)
	var got []string
	for _, f := range res.loose {
		got = append(got, fmt.Sprintf("%d:%s", f.line, f.match))
	}
	want := []string{"1:3.4 s", "14:3.4–7.3 s", "14:20 %", "14:1,000 requests", "14:5 docs/s", "14:2.8 GB", "14:5½ min"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("loose figures: got %q, want %q", got, want)
	}
	if len(res.blocks) != 2 || res.blocks[0].err != "" || res.blocks[0].command != "make bench" || strings.Join(res.blocks[0].commits, " ") != "0123abc" {
		t.Errorf("first block: %+v", res.blocks)
	}
	if len(res.blocks) == 2 && res.blocks[1].err == "" {
		t.Errorf("a block without command and commit passes: %+v", res.blocks[1])
	}
	if len(res.blocks) == 2 && res.blocks[0].flags {
		t.Errorf("a block without a flags line has one: %+v", res.blocks[0])
	}
	wrapped := scanFigures("x.md", figureOpen+"\nMeasured with `make bench` at commit `0123abc`. Flags changed from the\nshipped defaults: none.\n"+figureClose+"\n")
	if len(wrapped.blocks) != 1 || !wrapped.blocks[0].flags {
		t.Errorf("a flags line wrapped over two lines is not found: %+v", wrapped.blocks)
	}
}
