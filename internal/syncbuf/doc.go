// Package syncbuf holds Buffer, a bytes.Buffer safe for concurrent use: the
// one the module's tests write a child process's output or a logger into
// while goroutines of the code under test write too.
package syncbuf
