package inspect

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis/internal/redistest"
)

// selfSigned writes a self-signed certificate for 127.0.0.1 and its key.
func selfSigned(t *testing.T) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "a2redis-inspect test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600))
	return certFile, keyFile
}

func TestTLS(t *testing.T) {
	t.Parallel()
	if os.Getenv(redistest.EnvURL) != "" {
		t.Skip("spawns its own TLS server")
	}
	certFile, keyFile := selfSigned(t)
	tlsAddr := closedPort(t)
	_, tlsPort, _ := net.SplitHostPort(tlsAddr)
	in := redistest.SpawnServer(t, "--tls-port", tlsPort, "--tls-cert-file", certFile, "--tls-key-file", keyFile,
		"--tls-ca-cert-file", certFile, "--tls-auth-clients", "no")

	line := (&cli{url: "rediss://" + tlsAddr}).run(t, "", "info").failed(t, ExitError)
	assert.Contains(t, line, "TLS certificate of "+tlsAddr+" is not trusted")
	assert.Contains(t, line, "?skip_verify=true")

	var doc infoDoc
	parseJSON(t, (&cli{url: "rediss://" + tlsAddr + "?skip_verify=true"}).run(t, "", "info", "--json").ok(t), &doc)
	assert.Equal(t, "standalone", doc.Mode)
	require.Len(t, doc.Nodes, 1)
	assert.Equal(t, helloServer(t, in.Addr()), doc.Nodes[0].Server)

	line = (&cli{url: "rediss://" + in.Addr() + "?skip_verify=true"}).run(t, "", "info", "--timeout", "2s").failed(t, ExitError)
	assert.Contains(t, line, in.Addr())
	assert.True(t, strings.Contains(line, "does not speak TLS") || strings.Contains(line, "speaks TLS on that port (else use redis://)"), line)
	line = (&cli{url: "redis://" + tlsAddr}).run(t, "", "info", "--timeout", "2s").failed(t, ExitError)
	assert.Contains(t, line, tlsAddr)
	assert.Contains(t, line, "rediss://")
}
