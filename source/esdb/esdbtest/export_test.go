package esdbtest

// Test-only introspection, used by the external tests to wait for the
// server side effect of asynchronous acks instead of sleeping.

// Outstanding returns how many messages of a persistent subscription group
// ("<stream>::<group>") are read but not finished (in flight or queued).
func (s *Server) Outstanding(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if g := s.groups[key]; g != nil {
		return len(g.outstanding)
	}
	return -1
}

// HasCheckpoint reports whether the group has written a checkpoint.
func (s *Server) HasCheckpoint(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.groups[key]
	return g != nil && g.cp != nil
}
