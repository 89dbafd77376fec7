// Package retry is inorder's one backoff policy, used wherever the code
// waits before trying again: exponential growth from an initial delay,
// capped, with jitter, for at most a maximum elapsed time.
//
// The delay before retry n (1-based) is drawn uniformly from [d/2, d], where
// d = min(Initial·2^(n-1), Max): the spread keeps competing workers from
// retrying in lockstep, and the floor keeps a retry from coming at once. A
// Backoff stops (Next returns false) once the time since Start plus the next
// delay would pass MaxElapsed.
package retry
