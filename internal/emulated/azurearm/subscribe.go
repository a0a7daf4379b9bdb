package azurearm

// Subscribers are told of every change to the stored state, for readers
// that must follow it (the lab's Azure data plane programs a namespace from
// the stored load balancers). OnWrite stays the single hook the lab's
// fault scenarios own; a subscriber never displaces it.

// Subscribe registers f to be called once after each accepted write (a PUT
// or DELETE that passed its precondition) and after each Seed, with the
// change already visible and writes still held: a reader that takes its
// copy from inside f sees exactly the state that write left, in write
// order. Keep f short and never write to the emulator from it. The
// returned cancel removes f; it is idempotent.
func (e *Emulator) Subscribe(f func()) (cancel func()) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.subs == nil {
		e.subs = map[uint64]func(){}
	}
	e.subSeq++
	id := e.subSeq
	e.subs[id] = f
	return func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		delete(e.subs, id)
	}
}

// notify calls the subscribers. e.writeMu is held, e.mu is not.
func (e *Emulator) notify() {
	e.mu.Lock()
	fs := make([]func(), 0, len(e.subs))
	for _, f := range e.subs {
		fs = append(fs, f)
	}
	e.mu.Unlock()
	for _, f := range fs {
		f()
	}
}
