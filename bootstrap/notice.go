package bootstrap

import "time"

// notice is one word of the world: closed once heard.
type notice struct {
	heard chan struct{}
	done  bool
}

// maxNoticeKey bounds a notice's key, which every process keeps.
const maxNoticeKey = 256

func (t *TCP) noticeOf(key string) *notice {
	if t.notices == nil {
		t.notices = map[string]*notice{}
	}
	n := t.notices[key]
	if n == nil {
		n = &notice{heard: make(chan struct{})}
		t.notices[key] = n
	}
	return n
}

// Notice tells every process of the world key, outside the lock-step
// rounds and without ending the world (a fault does that): it floods the
// tree, each process passing it on once to its links but the one it came
// from, so it crosses each link at most twice whatever the world's size.
// Sends are bounded by the silence bound and made in the background; a
// process that cannot be reached is left to the heartbeats. A second
// Notice of the same key does nothing.
func (t *TCP) Notice(key string) {
	t.noticeFrom(noticeKey(key), -1)
}

// noticeKey is key as a notice carries it: at most maxNoticeKey bytes.
func noticeKey(key string) string {
	if len(key) > maxNoticeKey {
		return key[:maxNoticeKey]
	}
	return key
}

// Noticed is closed once this process has heard key, from any process
// (itself included), before or after the call.
func (t *TCP) Noticed(key string) <-chan struct{} {
	t.noticeMu.Lock()
	defer t.noticeMu.Unlock()
	return t.noticeOf(noticeKey(key)).heard
}

// noticeFrom records key, heard from rank from (-1: this process), and
// passes it on the first time.
func (t *TCP) noticeFrom(key string, from int) {
	if len(key) > maxNoticeKey {
		return
	}
	t.noticeMu.Lock()
	n := t.noticeOf(key)
	if n.done {
		t.noticeMu.Unlock()
		return
	}
	n.done = true
	close(n.heard)
	t.noticeMu.Unlock()
	timeout := t.silence
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	for _, p := range t.links() {
		if p.rank != from {
			go func() { _ = p.send(frameNotice, []byte(key), timeout) }()
		}
	}
}
