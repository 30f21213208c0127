// Package keylockproxy emulates Upstash's key-locking script mode in front
// of a real Redis server, so the conformance suite can prove that a store
// detects the allow-key-locking flag, uses it on every script, and never
// reaches outside the session its script declares.
//
// The proxy listens on a loopback TCP port and opens one backend connection
// per client connection. It forwards every command verbatim except the
// script commands, which it rewrites:
//
//   - A script starting with `#!lua flags=allow-key-locking` (or with
//     no-writes among its flags) is accepted: the flag is taken off the
//     shebang (keeping no-writes, which the server enforces), and a Lua shim
//     is put in front of the body that wraps redis.call and redis.pcall and
//     refuses any command touching a key whose hash tag differs from that
//     of KEYS[1] (or any command it does not know the key positions of).
//     The declared keys must share one hash tag.
//   - EVALSHA of a flagged script's SHA1 is mapped to the SHA1 of its
//     rewritten text (recorded when the proxy saw the script in EVAL or
//     SCRIPT LOAD); an unknown SHA1 is answered NOSCRIPT by the server, so
//     clients fall back to EVAL.
//   - With RequireFlag, a script without the flag is refused.
//
// A refusal is an error reply in the command's place in the pipeline: the
// proxy forwards, instead of the command, a script that returns the error.
// So replies always come from the server, in order, and the proxy never
// parses them; RESP2 and RESP3 (HELLO 3, pushes, pub/sub) pass through
// untouched.
package keylockproxy

import (
	"bufio"
	"crypto/sha1"
	"encoding/hex"
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

// The shebang flag that asks for key locking.
const flagKeyLocking = "allow-key-locking"

// Options configure a Proxy.
type Options struct {
	// Backend is the host:port of the Redis server behind the proxy.
	// Required.
	Backend string
	// RequireFlag refuses every script that does not carry the
	// allow-key-locking flag. Default false: such scripts run unchecked (as
	// Upstash runs them, under its database-wide lock).
	RequireFlag bool
}

// Stats counts what the proxy saw.
type Stats struct {
	// Flagged counts script commands carrying the key-locking flag.
	Flagged int64
	// Plain counts script commands without it.
	Plain int64
	// Refused counts script commands refused (unflagged with RequireFlag,
	// or declaring keys of several hash tags).
	Refused int64
	// Mapped counts EVALSHA commands mapped to a rewritten script.
	Mapped int64
}

// Proxy is a running key-locking proxy. Its methods are safe for
// concurrent use.
type Proxy struct {
	opts Options
	ln   net.Listener

	mu     sync.Mutex
	shas   map[string]string // SHA1 of a flagged script → SHA1 of its rewrite
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup

	flagged, plain, refused, mapped atomic.Int64
}

// Start starts a proxy on 127.0.0.1 (a free port) in front of
// opts.Backend.
func Start(opts Options) (*Proxy, error) {
	if opts.Backend == "" {
		return nil, errors.New("keylockproxy: Options.Backend is empty")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("keylockproxy: listen: %w", err)
	}
	p := &Proxy{opts: opts, ln: ln, shas: map[string]string{}, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the host:port clients connect to.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Stats returns the counts so far.
func (p *Proxy) Stats() Stats {
	return Stats{Flagged: p.flagged.Load(), Plain: p.plain.Load(), Refused: p.refused.Load(), Mapped: p.mapped.Load()}
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
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.serve(client)
		}()
	}
}

// serve proxies one client connection over a backend connection of its
// own: replies are copied back verbatim, requests parsed and rewritten.
func (p *Proxy) serve(client net.Conn) {
	defer client.Close()
	if !p.track(client) {
		return
	}
	defer p.untrack(client)
	backend, err := net.DialTimeout("tcp", p.opts.Backend, 5*time.Second)
	if err != nil {
		return
	}
	defer backend.Close()
	if !p.track(backend) {
		return
	}
	defer p.untrack(backend)

	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(client, backend)
		_ = client.Close() // the server hung up: so does the proxy
	}()
	r := bufio.NewReaderSize(client, 64*1024)
	w := bufio.NewWriterSize(backend, 64*1024)
	for {
		raw, args, err := readCommand(r)
		if err != nil {
			break
		}
		out := raw
		if args != nil {
			if rewritten := p.rewrite(args); rewritten != nil {
				out = encode(rewritten)
			}
		}
		if _, err := w.Write(out); err != nil {
			break
		}
		// Flush once the client has nothing more pipelined.
		if r.Buffered() == 0 {
			if err := w.Flush(); err != nil {
				break
			}
		}
	}
	_ = backend.Close()
	<-done
}

// readCommand reads one command: a RESP array of bulk strings (args set,
// raw its exact bytes) or an inline command line (args nil).
func readCommand(r *bufio.Reader) (raw []byte, args [][]byte, err error) {
	line, err := r.ReadSlice('\n')
	if err != nil {
		return nil, nil, err
	}
	raw = append([]byte(nil), line...)
	if len(line) == 0 || line[0] != '*' {
		return raw, nil, nil // inline: forwarded as is
	}
	n, err := strconv.Atoi(strings.TrimRight(string(line[1:]), "\r\n"))
	if err != nil || n < 0 {
		return nil, nil, fmt.Errorf("keylockproxy: bad array header %q", line)
	}
	args = make([][]byte, 0, n)
	for range n {
		head, err := r.ReadSlice('\n')
		if err != nil {
			return nil, nil, err
		}
		raw = append(raw, head...)
		if len(head) == 0 || head[0] != '$' {
			return nil, nil, fmt.Errorf("keylockproxy: bad bulk header %q", head)
		}
		size, err := strconv.Atoi(strings.TrimRight(string(head[1:]), "\r\n"))
		if err != nil || size < 0 {
			return nil, nil, fmt.Errorf("keylockproxy: bad bulk length %q", head)
		}
		body := make([]byte, size+2)
		if _, err := io.ReadFull(r, body); err != nil {
			return nil, nil, err
		}
		raw = append(raw, body...)
		args = append(args, body[:size])
	}
	return raw, args, nil
}

func encode(args [][]byte) []byte {
	var b []byte
	b = append(b, '*')
	b = strconv.AppendInt(b, int64(len(args)), 10)
	b = append(b, '\r', '\n')
	for _, a := range args {
		b = append(b, '$')
		b = strconv.AppendInt(b, int64(len(a)), 10)
		b = append(b, '\r', '\n')
		b = append(b, a...)
		b = append(b, '\r', '\n')
	}
	return b
}

// refusal is the command forwarded in place of a refused one: a script
// whose reply is the error.
func refusal(msg string) [][]byte {
	return [][]byte{[]byte("EVAL"), []byte("return redis.error_reply(ARGV[1])"), []byte("0"), []byte("KEYLOCK " + msg)}
}

func sha(s []byte) string {
	h := sha1.Sum(s)
	return hex.EncodeToString(h[:])
}

// rewrite returns the command to forward instead of args, or nil to
// forward it verbatim.
func (p *Proxy) rewrite(args [][]byte) [][]byte {
	if len(args) == 0 {
		return nil
	}
	switch name := strings.ToUpper(string(args[0])); name {
	case "EVAL", "EVAL_RO":
		if len(args) < 3 {
			return nil
		}
		body, flagged := Unflag(args[1])
		if !flagged {
			return p.plainScript()
		}
		p.flagged.Add(1)
		if msg := declaredKeys(args[2], args[3:]); msg != "" {
			p.refused.Add(1)
			return refusal(msg)
		}
		p.remember(sha(args[1]), body)
		out := append([][]byte{args[0], body}, args[2:]...)
		return out
	case "EVALSHA", "EVALSHA_RO":
		if len(args) < 3 {
			return nil
		}
		p.mu.Lock()
		mapped, ok := p.shas[strings.ToLower(string(args[1]))]
		p.mu.Unlock()
		if !ok {
			// Not a script the proxy rewrote (yet): the server answers
			// NOSCRIPT, or runs a plain script it already holds.
			if p.opts.RequireFlag {
				// NOSCRIPT, so the client sends the text and it is checked.
				out := append([][]byte{args[0], []byte(strings.Repeat("f", 40))}, args[2:]...)
				return out
			}
			return nil
		}
		p.flagged.Add(1)
		p.mapped.Add(1)
		if msg := declaredKeys(args[2], args[3:]); msg != "" {
			p.refused.Add(1)
			return refusal(msg)
		}
		return append([][]byte{args[0], []byte(mapped)}, args[2:]...)
	case "SCRIPT":
		if len(args) != 3 || !strings.EqualFold(string(args[1]), "LOAD") {
			return nil
		}
		body, flagged := Unflag(args[2])
		if !flagged {
			return p.plainScript()
		}
		p.flagged.Add(1)
		p.remember(sha(args[2]), body)
		if err := p.load(body); err != nil {
			return refusal("cannot load the rewritten script: " + err.Error())
		}
		// The reply a client expects: the SHA1 of the text it sent.
		return [][]byte{[]byte("EVAL"), []byte("return ARGV[1]"), []byte("0"), []byte(sha(args[2]))}
	}
	return nil
}

func (p *Proxy) plainScript() [][]byte {
	p.plain.Add(1)
	if p.opts.RequireFlag {
		p.refused.Add(1)
		return refusal("script without the " + flagKeyLocking + " flag")
	}
	return nil
}

func (p *Proxy) remember(flaggedSHA string, body []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.shas[flaggedSHA] = sha(body)
}

// load loads a rewritten script into the server's cache over a connection
// of its own.
func (p *Proxy) load(body []byte) error {
	c, err := net.DialTimeout("tcp", p.opts.Backend, 5*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(encode([][]byte{[]byte("SCRIPT"), []byte("LOAD"), body})); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if strings.HasPrefix(line, "-") {
		return errors.New(strings.TrimSpace(line[1:]))
	}
	return nil
}

// HashTag returns the part of a key Redis Cluster hashes: the text between
// the first '{' and the next '}' when that is not empty, else the key.
func HashTag(key string) string {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return key
	}
	end := strings.IndexByte(key[open+1:], '}')
	if end <= 0 {
		return key
	}
	return key[open+1 : open+1+end]
}

// declaredKeys checks that a script's declared keys share one hash tag; it
// returns the refusal message, or "".
func declaredKeys(numkeys []byte, rest [][]byte) string {
	n, err := strconv.Atoi(string(numkeys))
	if err != nil || n < 0 || n > len(rest) {
		return "" // the server refuses it itself
	}
	for i := 1; i < n; i++ {
		if HashTag(string(rest[i])) != HashTag(string(rest[0])) {
			return fmt.Sprintf("declared keys %q and %q have different hash tags", rest[0], rest[i])
		}
	}
	return ""
}

// Unflag returns the script to forward for a script that asks for key
// locking: the shebang without the allow-key-locking flag (other flags,
// such as no-writes, kept), then the key-checking shim, then the body. It
// reports false (and returns nil) for a script without the flag.
func Unflag(script []byte) ([]byte, bool) {
	text := string(script)
	if !strings.HasPrefix(text, "#!lua") {
		return nil, false
	}
	first, body, _ := strings.Cut(text, "\n")
	var flags []string
	flagged := false
	for _, field := range strings.Fields(strings.TrimPrefix(first, "#!lua")) {
		list, ok := strings.CutPrefix(field, "flags=")
		if !ok {
			return nil, false // an option this proxy does not know
		}
		for _, f := range strings.Split(list, ",") {
			if f == flagKeyLocking {
				flagged = true
			} else if f != "" {
				flags = append(flags, f)
			}
		}
	}
	if !flagged {
		return nil, false
	}
	shebang := "#!lua"
	if len(flags) > 0 {
		shebang += " flags=" + strings.Join(flags, ",")
	}
	return []byte(shebang + "\n" + shim + "\n" + body), true
}
