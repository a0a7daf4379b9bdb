package sockcount

import "strings"

// readVerbs are the first words of the runtime API commands that change
// nothing in HAProxy: they read state or only change this CLI session
// (prompt, privilege level). Every other command, known or not, is counted
// as a write, so that a command this list forgets can only over-count.
var readVerbs = map[string]bool{
	"show":              true,
	"get":               true,
	"help":              true,
	"prompt":            true,
	"quit":              true,
	"user":              true, // session privilege level
	"operator":          true,
	"expert-mode":       true,
	"experimental-mode": true,
	"mcli-debug-mode":   true,
}

// Classify classifies one runtime API command (one element of what
// splitCommands yields). verb is the command's first two words ("set server",
// "del server", "reload", "show stat"); the master CLI's routing prefixes
// (@1, @!<pid>, @master) are not part of it. ok is false for a command with no
// words, which HAProxy ignores.
func Classify(command string) (verb string, write, ok bool) {
	args := splitArgs(command)
	for len(args) > 0 && strings.HasPrefix(args[0], "@") {
		args = args[1:]
	}
	if len(args) == 0 {
		return "", false, false
	}
	if len(args) > 2 {
		args = args[:2]
	}
	if args[len(args)-1] == payloadPattern {
		args = args[:len(args)-1]
	}
	if len(args) == 0 {
		return "", false, false
	}
	verb = strings.Join(args, " ")
	return verb, !readVerbs[args[0]], true
}

// payloadPattern ends a command line whose payload follows on the next lines,
// up to an empty line (`add map … <<`, `set ssl cert … <<`).
const payloadPattern = "<<"

// splitArgs splits a command into words the way HAProxy's cli_parse_request
// does: words are separated by spaces and tabs, and a backslash makes the
// next character part of the word (`\ `, `\;`, `\\`).
func splitArgs(command string) []string {
	var args []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(command); i++ {
		c := command[i]
		switch {
		case c == '\\' && i+1 < len(command):
			i++
			cur.WriteByte(command[i])
			inWord = true
		case c == ' ' || c == '\t' || c == '\r':
			if inWord {
				args = append(args, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		args = append(args, cur.String())
	}
	return args
}

// maxCommand bounds the bytes kept of one command: only its first words
// matter, and a client sending an endless line must not grow the proxy.
const maxCommand = 4096

// splitter cuts the client→HAProxy byte stream into commands the way the
// CLI does: a command ends at an unescaped newline or ';', a backslash
// escapes the next byte, and after a line ending in "<<" the lines up to the
// next empty line are payload, not commands.
type splitter struct {
	cur     []byte
	escaped bool
	payload bool // inside a payload, cur holds the current payload line
	lineLen int  // bytes of the current payload line
	emit    func(command string)
}

func (s *splitter) write(p []byte) {
	for _, c := range p {
		if s.payload {
			if c == '\n' {
				if s.lineLen == 0 {
					s.payload = false
				}
				s.lineLen = 0
			} else {
				s.lineLen++
			}
			continue
		}
		if s.escaped {
			s.escaped = false
			s.add('\\')
			s.add(c)
			continue
		}
		switch c {
		case '\\':
			s.escaped = true
		case '\n', ';':
			s.end(c == '\n')
		default:
			s.add(c)
		}
	}
}

func (s *splitter) add(c byte) {
	if len(s.cur) < maxCommand {
		s.cur = append(s.cur, c)
	}
}

// end finishes the current command; newline tells whether a line ended
// (payload starts only after a line).
func (s *splitter) end(newline bool) {
	cmd := string(s.cur)
	s.cur = s.cur[:0]
	args := splitArgs(cmd)
	if newline && len(args) > 0 && args[len(args)-1] == payloadPattern {
		s.payload, s.lineLen = true, 0
	}
	s.emit(cmd)
}

// flush ends a last command the client sent without a newline before
// closing its side: HAProxy runs it too.
func (s *splitter) flush() {
	if s.payload {
		return
	}
	if s.escaped {
		s.escaped = false
		s.add('\\')
	}
	if len(s.cur) > 0 {
		s.end(false)
	}
}
