package service

import (
	"fmt"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
)

// API limits on what the controller writes. The API refuses a longer Event
// note outright, so the Event would be lost; a message can echo a whole
// annotation value or a provider's error with its URL and body.
const (
	maxEventNote        = 1024
	maxConditionMessage = 32768
)

// truncatingRecorder cuts every Event note to what the API accepts. Every
// Event of the controller goes through it (New wraps Options.Recorder).
type truncatingRecorder struct{ events.EventRecorder }

func (r truncatingRecorder) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	r.EventRecorder.Eventf(regarding, related, eventtype, reason, action, "%s", truncate(fmt.Sprintf(note, args...), maxEventNote))
}

// truncate cuts s to at most max bytes, the mark "…" included, at a rune
// boundary so that the result stays valid UTF-8.
func truncate(s string, max int) string {
	if len(s) <= max {
		return s
	}
	const mark = "…"
	cut := max - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}
