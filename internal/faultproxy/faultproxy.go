// Package faultproxy puts a TCP proxy in front of a Redis server that
// injects faults at chosen points of the command stream, so that a test's
// fault happens where the test says, not when a timer racing the workload
// happens to fire.
//
// The proxy opens one backend connection per client connection and reads
// both directions as RESP frames (RESP2 and RESP3): it knows which reply
// answers which command. A Rule picks commands by name and by count across
// every connection (the 1st, 2nd, … matching command the proxy saw), and
// says what happens to a picked one:
//
//   - DropReply: the command goes to the server and runs; the proxy waits
//     for its reply and, instead of passing it on, closes the client's
//     connection (and its backend connection). A write committed; the
//     client never learns of it.
//   - DropCommand: the proxy closes the client's connection instead of
//     forwarding the command: the server never sees it.
//   - Stall: the command is held for Rule.Stall before it is forwarded (the
//     connection's later commands wait behind it), as a slow network or a
//     stalled node would hold it.
//
// Every fault made is counted (Stats), so a test asserts the faults that
// actually happened. Push frames (RESP3 '>') pass through without being
// taken for a reply, and the replies to (P|S)SUBSCRIBE and their UN-
// forms, which are pushes in RESP3, are not waited for.
package faultproxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Fault is what happens to a command a Rule picks.
type Fault int

const (
	// DropReply forwards the command, waits for its reply and closes the
	// client's connection instead of passing the reply on.
	DropReply Fault = iota
	// DropCommand closes the client's connection instead of forwarding
	// the command.
	DropCommand
	// Stall holds the command for Rule.Stall, then forwards it.
	Stall
)

func (f Fault) String() string {
	switch f {
	case DropReply:
		return "drop-reply"
	case DropCommand:
		return "drop-command"
	case Stall:
		return "stall"
	}
	return "fault(" + strconv.Itoa(int(f)) + ")"
}

// Rule picks the commands to fault. The zero Rule picks nothing.
type Rule struct {
	// Commands are the command names that count (case-insensitive, e.g.
	// "EVALSHA", "EVAL"); empty: every command counts.
	Commands []string
	// Every picks every Nth counted command: the Nth, 2Nth, 3Nth, ….
	Every int
	// Nth picks the counted commands at these positions (1-based), in
	// addition to Every.
	Nth []int64
	// Limit stops faulting after this many faults of this rule; 0: no
	// limit.
	Limit int64
	// Fault is what happens to a picked command.
	Fault Fault
	// Faults, when set, takes Fault's place: the kth fault of the rule
	// (from 0) is Faults[k % len(Faults)].
	Faults []Fault
	// Stall is how long a Stall fault holds its command.
	Stall time.Duration
}

// Stats counts what the proxy saw and did.
type Stats struct {
	// Commands counts every command the proxy read from clients.
	Commands int64
	// Counted counts the commands the rule's Commands matched.
	Counted int64
	// Faults counts the faults made.
	Faults int64
	// Connections counts the client connections accepted.
	Connections int64
}

// Proxy is a running fault proxy. Its methods are safe for concurrent use.
type Proxy struct {
	backend string
	ln      net.Listener

	mu     sync.Mutex
	rule   Rule
	names  map[string]bool
	nth    map[int64]bool
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup

	ruleFaults                             int64 // faults since SetRule; under mu
	commands, counted, faults, connections atomic.Int64
}

// Start starts a proxy on 127.0.0.1 (a free port) in front of backend
// (host:port) with rule in force.
func Start(backend string, rule Rule) (*Proxy, error) {
	if backend == "" {
		return nil, errors.New("faultproxy: no backend address")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	p := &Proxy{backend: backend, ln: ln, conns: map[net.Conn]struct{}{}}
	p.SetRule(rule)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the host:port clients connect to.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetRule puts rule in force for the commands read from now on; the count
// of matching commands starts again from zero.
func (p *Proxy) SetRule(rule Rule) {
	names := map[string]bool{}
	for _, n := range rule.Commands {
		names[strings.ToUpper(n)] = true
	}
	nth := map[int64]bool{}
	for _, n := range rule.Nth {
		nth[n] = true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rule, p.names, p.nth, p.ruleFaults = rule, names, nth, 0
	p.counted.Store(0)
}

// Stats returns the counts so far (Counted since the last SetRule).
func (p *Proxy) Stats() Stats {
	return Stats{Commands: p.commands.Load(), Counted: p.counted.Load(), Faults: p.faults.Load(), Connections: p.connections.Load()}
}

// Close stops accepting, closes every connection and waits for the
// connection goroutines to end.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	err := p.ln.Close()
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

// decide counts a command and says whether, and how, to fault it.
func (p *Proxy) decide(name string) (fault Fault, stall time.Duration, hit bool) {
	p.commands.Add(1)
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.names) > 0 && !p.names[name] {
		return 0, 0, false
	}
	n := p.counted.Add(1)
	r := p.rule
	if !(r.Every > 0 && n%int64(r.Every) == 0) && !p.nth[n] {
		return 0, 0, false
	}
	if r.Limit > 0 && p.ruleFaults >= r.Limit {
		return 0, 0, false
	}
	fault = r.Fault
	if len(r.Faults) > 0 {
		fault = r.Faults[p.ruleFaults%int64(len(r.Faults))]
	}
	p.ruleFaults++
	p.faults.Add(1)
	return fault, r.Stall, true
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, c)
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.connections.Add(1)
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.serve(client)
		}()
	}
}

// pending is the queue of replies a connection waits for, in order: true
// for a reply to drop (and cut the connection at).
type pending struct {
	mu    sync.Mutex
	slots []bool
}

func (q *pending) push(drop bool) {
	q.mu.Lock()
	q.slots = append(q.slots, drop)
	q.mu.Unlock()
}

// pop returns the next slot; ok is false when no reply was awaited.
func (q *pending) pop() (drop, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.slots) == 0 {
		return false, false
	}
	drop = q.slots[0]
	q.slots = q.slots[1:]
	return drop, true
}

// serve proxies one client connection over a backend connection of its
// own.
func (p *Proxy) serve(client net.Conn) {
	defer client.Close()
	if !p.track(client) {
		return
	}
	defer p.untrack(client)
	backend, err := net.DialTimeout("tcp", p.backend, 5*time.Second)
	if err != nil {
		return
	}
	defer backend.Close()
	if !p.track(backend) {
		return
	}
	defer p.untrack(backend)
	var once sync.Once
	cut := func() { once.Do(func() { _ = client.Close(); _ = backend.Close() }) }

	q := &pending{}
	done := make(chan struct{})
	go func() { // replies: server → client
		defer close(done)
		defer cut()
		r := bufio.NewReaderSize(backend, 64*1024)
		w := bufio.NewWriterSize(client, 64*1024)
		for {
			raw, push, err := readReply(r)
			if err != nil {
				_ = w.Flush()
				return
			}
			if !push {
				if drop, ok := q.pop(); ok && drop {
					_ = w.Flush() // the replies before it reach the client
					return
				}
			}
			if _, err := w.Write(raw); err != nil {
				return
			}
			if r.Buffered() == 0 {
				if err := w.Flush(); err != nil {
					return
				}
			}
		}
	}()

	r := bufio.NewReaderSize(client, 64*1024)
	w := bufio.NewWriterSize(backend, 64*1024)
	for {
		raw, name, err := readCommand(r)
		if err != nil {
			break
		}
		fault, stall, hit := p.decide(name)
		if hit && fault == DropCommand {
			_ = w.Flush()
			break
		}
		if hit && fault == Stall {
			if err := w.Flush(); err != nil {
				break
			}
			time.Sleep(stall)
		}
		if !noReply(name) {
			q.push(hit && fault == DropReply)
		}
		if _, err := w.Write(raw); err != nil {
			break
		}
		if r.Buffered() == 0 {
			if err := w.Flush(); err != nil {
				break
			}
		}
	}
	cut()
	<-done
}

// noReply reports the commands whose answers are push frames in RESP3.
func noReply(name string) bool {
	switch name {
	case "SUBSCRIBE", "PSUBSCRIBE", "SSUBSCRIBE", "UNSUBSCRIBE", "PUNSUBSCRIBE", "SUNSUBSCRIBE":
		return true
	}
	return false
}

// readCommand reads one command (a RESP array of bulk strings, or an
// inline command) and returns its bytes and its upper-cased name.
func readCommand(r *bufio.Reader) (raw []byte, name string, err error) {
	line, err := readLine(r)
	if err != nil {
		return nil, "", err
	}
	if len(line) == 0 || line[0] != '*' {
		f := strings.Fields(string(line))
		if len(f) > 0 {
			name = strings.ToUpper(f[0])
		}
		return append(line, '\r', '\n'), name, nil
	}
	n, err := strconv.Atoi(string(line[1:]))
	if err != nil {
		return nil, "", fmt.Errorf("faultproxy: bad array header %q", line)
	}
	raw = append(append(raw, line...), '\r', '\n')
	for i := 0; i < n; i++ {
		hdr, err := readLine(r)
		if err != nil {
			return nil, "", err
		}
		if len(hdr) == 0 || hdr[0] != '$' {
			return nil, "", fmt.Errorf("faultproxy: bad bulk header %q", hdr)
		}
		size, err := strconv.Atoi(string(hdr[1:]))
		if err != nil || size < 0 {
			return nil, "", fmt.Errorf("faultproxy: bad bulk header %q", hdr)
		}
		raw = append(append(raw, hdr...), '\r', '\n')
		start := len(raw)
		raw = append(raw, make([]byte, size+2)...)
		if _, err := io.ReadFull(r, raw[start:]); err != nil {
			return nil, "", err
		}
		if i == 0 {
			name = strings.ToUpper(string(raw[start : start+size]))
		}
	}
	return raw, name, nil
}

// readReply reads one reply frame, attributes before it included, and says
// whether it is a push frame.
func readReply(r *bufio.Reader) (raw []byte, push bool, err error) {
	for {
		b, err := r.Peek(1)
		if err != nil {
			return nil, false, err
		}
		if b[0] != '|' {
			push = b[0] == '>'
			break
		}
		// An attribute map comes before the reply it describes.
		if raw, err = readFrame(r, raw); err != nil {
			return nil, false, err
		}
	}
	raw, err = readFrame(r, raw)
	return raw, push, err
}

// readFrame appends one RESP2/RESP3 value to raw.
func readFrame(r *bufio.Reader, raw []byte) ([]byte, error) {
	line, err := readLine(r)
	if err != nil {
		return nil, err
	}
	raw = append(append(raw, line...), '\r', '\n')
	if len(line) == 0 {
		return nil, errors.New("faultproxy: empty frame header")
	}
	switch line[0] {
	case '+', '-', ':', ',', '#', '_', '(':
		return raw, nil
	case '$', '!', '=':
		size, err := strconv.Atoi(string(line[1:]))
		if err != nil {
			return nil, fmt.Errorf("faultproxy: bad length %q", line)
		}
		if size < 0 {
			return raw, nil
		}
		start := len(raw)
		raw = append(raw, make([]byte, size+2)...)
		_, err = io.ReadFull(r, raw[start:])
		return raw, err
	case '*', '~', '>', '%', '|':
		n, err := strconv.Atoi(string(line[1:]))
		if err != nil {
			return nil, fmt.Errorf("faultproxy: bad count %q", line)
		}
		if line[0] == '%' || line[0] == '|' {
			n *= 2
		}
		for i := 0; i < n; i++ {
			if raw, err = readFrame(r, raw); err != nil {
				return nil, err
			}
		}
		return raw, nil
	}
	return nil, fmt.Errorf("faultproxy: unknown frame type %q", line[0])
}

// readLine reads a line without its CRLF.
func readLine(r *bufio.Reader) ([]byte, error) {
	line, err := r.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		var long []byte
		long = append(long, line...)
		for err == bufio.ErrBufferFull {
			line, err = r.ReadSlice('\n')
			long = append(long, line...)
		}
		line = long
	}
	if err != nil {
		return nil, err
	}
	if len(line) < 2 || line[len(line)-2] != '\r' {
		return nil, fmt.Errorf("faultproxy: line without CRLF")
	}
	return append([]byte(nil), line[:len(line)-2]...), nil
}
