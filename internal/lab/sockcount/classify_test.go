package sockcount

import (
	"slices"
	"testing"
)

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		command string
		verb    string
		write   bool
		ok      bool
	}{
		{"show stat", "show stat", false, true},
		{"show servers state", "show servers", false, true},
		{"  show\tinfo  ", "show info", false, true},
		{"show map /tmp/x/listeners.map", "show map", false, true},
		{"get weight be/srv", "get weight", false, true},
		{"help", "help", false, true},
		{"prompt", "prompt", false, true},
		{"quit", "quit", false, true},
		{"@1 show stat", "show stat", false, true},
		{"@!1234 show stat", "show stat", false, true},
		{"@master show proc", "show proc", false, true},
		{"show proc", "show proc", false, true},
		{"expert-mode on", "expert-mode on", false, true},
		{"reload", "reload", true, true},
		{"add server zd_x/s1 127.0.0.1:80 check", "add server", true, true},
		{"del server zd_x/s1", "del server", true, true},
		{"set server zd_x/s1 state drain", "set server", true, true},
		{"set server zd_x/s1 weight 50", "set server", true, true},
		{"set weight zd_x/s1 50", "set weight", true, true},
		{"set maxconn server zd_x/s1 10", "set maxconn", true, true},
		{"set map /m key value", "set map", true, true},
		{"enable health zd_x/s1", "enable health", true, true},
		{"disable agent zd_x/s1", "disable agent", true, true},
		{"enable server zd_x/s1", "enable server", true, true},
		{"shutdown sessions server zd_x/s1", "shutdown sessions", true, true},
		{"clear counters all", "clear counters", true, true},
		{"new ssl cert /c.pem", "new ssl", true, true},
		{"commit ssl cert /c.pem", "commit ssl", true, true},
		{"add map /m <<", "add map", true, true},
		{"@1 del server zd_x/s1", "del server", true, true},
		{"frobnicate everything", "frobnicate everything", true, true}, // unknown: a write
		{"set\\ server x", "set server x", true, true},                 // an escaped space joins the words: HAProxy sees "set server" and "x"
		{"", "", false, false},
		{"   ", "", false, false},
		{"@1", "", false, false},
	} {
		verb, write, ok := Classify(tc.command)
		if verb != tc.verb || write != tc.write || ok != tc.ok {
			t.Errorf("Classify(%q) = %q, write %v, ok %v; want %q, %v, %v", tc.command, verb, write, ok, tc.verb, tc.write, tc.ok)
		}
	}
}

func TestSplitter(t *testing.T) {
	for _, tc := range []struct {
		name   string
		chunks []string
		want   []string
	}{
		{"one per line", []string{"show stat\nreload\n"}, []string{"show stat", "reload"}},
		{"batched with ;", []string{"set server a/b state maint; shutdown sessions server a/b;del server a/b\n"},
			[]string{"set server a/b state maint", " shutdown sessions server a/b", "del server a/b"}},
		{"split across reads", []string{"set ser", "ver a/b sta", "te ready\nsho", "w info\n"},
			[]string{"set server a/b state ready", "show info"}},
		{"escaped ; and newline stay in the command", []string{"set map /m k a\\;b\nset map /m k c\\\nd\n"},
			[]string{"set map /m k a\\;b", "set map /m k c\\\nd"}},
		{"escape split across reads", []string{"set map /m k a\\", ";b\n"}, []string{"set map /m k a\\;b"}},
		{"payload lines are not commands", []string{"add map /m <<\nreload 1\ndel server x/y\n\nshow map /m\n"},
			[]string{"add map /m <<", "show map /m"}},
		{"last command without newline", []string{"show proc"}, []string{"show proc"}},
		{"prompt session", []string{"prompt\n", "show info\n", "\n", "quit\n"}, []string{"prompt", "show info", "", "quit"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			s := splitter{emit: func(c string) { got = append(got, c) }}
			for _, c := range tc.chunks {
				s.write([]byte(c))
			}
			s.flush()
			if !slices.Equal(got, tc.want) {
				t.Fatalf("commands %q, want %q", got, tc.want)
			}
		})
	}
}
