package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki is the material the API server and the kubeconfigs need, all in dir/pki.
type pki struct {
	dir        string
	caCert     string // serving CA, also in the kubeconfigs
	serverCert string // 127.0.0.1, localhost, kubernetes.default.svc...
	serverKey  string
	saKey      string // service-account token signing key (RSA)
	saPub      string
	tokens     string // --token-auth-file
	adminToken string
	userToken  string
	// Node mode: the components' users and the API server's client
	// certificate for the kubelet (system:masters).
	controllerManagerToken string
	schedulerToken         string
	nodeToken              string
	kubeletClientCert      string
	kubeletClientKey       string
}

const (
	adminUser = "kubewasm-admin"
	e2eUser   = "kubewasm-e2e"
)

// ensurePKI creates dir/pki once (certificates and keys are reused when the
// same --dir is started again) and writes fresh bearer tokens on every start.
func ensurePKI(dir string) (*pki, error) {
	p := &pki{dir: filepath.Join(dir, "pki")}
	p.caCert = filepath.Join(p.dir, "ca.crt")
	caKey := filepath.Join(p.dir, "ca.key")
	p.serverCert = filepath.Join(p.dir, "apiserver.crt")
	p.serverKey = filepath.Join(p.dir, "apiserver.key")
	p.saKey = filepath.Join(p.dir, "sa.key")
	p.saPub = filepath.Join(p.dir, "sa.pub")
	p.tokens = filepath.Join(p.dir, "tokens.csv")
	p.kubeletClientCert = filepath.Join(p.dir, "apiserver-kubelet-client.crt")
	p.kubeletClientKey = filepath.Join(p.dir, "apiserver-kubelet-client.key")
	if err := os.MkdirAll(p.dir, 0o700); err != nil {
		return nil, err
	}

	if !exists(p.caCert, caKey, p.serverCert, p.serverKey) {
		if err := writeServingCerts(p.caCert, caKey, p.serverCert, p.serverKey); err != nil {
			return nil, fmt.Errorf("serving certificates: %w", err)
		}
	}
	if !exists(p.saKey, p.saPub) {
		if err := writeServiceAccountKeys(p.saKey, p.saPub); err != nil {
			return nil, fmt.Errorf("service-account keys: %w", err)
		}
	}

	if !exists(p.kubeletClientCert, p.kubeletClientKey) {
		if err := writeClientCert(p.caCert, caKey, p.kubeletClientCert, p.kubeletClientKey,
			"kube-apiserver-kubelet-client", []string{"system:masters"}); err != nil {
			return nil, fmt.Errorf("kubelet client certificate: %w", err)
		}
	}

	p.adminToken = randomToken()
	p.userToken = randomToken()
	p.controllerManagerToken = randomToken()
	p.schedulerToken = randomToken()
	p.nodeToken = randomToken()
	// token,user,uid,"group1,group2"
	csv := fmt.Sprintf("%s,%s,%s,\"system:masters\"\n%s,%s,%s\n"+
		"%s,system:kube-controller-manager,kube-controller-manager-uid\n"+
		"%s,system:kube-scheduler,kube-scheduler-uid\n"+
		"%s,system:node:%s,node-uid,\"system:nodes\"\n",
		p.adminToken, adminUser, adminUser+"-uid",
		p.userToken, e2eUser, e2eUser+"-uid",
		p.controllerManagerToken, p.schedulerToken, p.nodeToken, nodeName)
	if err := writeFileAtomic(p.tokens, []byte(csv), 0o600); err != nil {
		return nil, err
	}
	return p, nil
}

func writeServingCerts(caCertPath, caKeyPath, certPath, keyPath string) error {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "kubewasm-controlplane-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1"), net.ParseIP(serviceIP)},
		DNSNames: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
			"kubernetes.default.svc.cluster.local"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return err
	}

	caKeyDER, err := x509.MarshalECPrivateKey(caKey)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	for _, f := range []struct {
		path, typ string
		der       []byte
	}{
		{caKeyPath, "EC PRIVATE KEY", caKeyDER},
		{keyPath, "EC PRIVATE KEY", keyDER},
		{caCertPath, "CERTIFICATE", caDER},
		{certPath, "CERTIFICATE", der},
	} {
		if err := writeFileAtomic(f.path, pem.EncodeToMemory(&pem.Block{Type: f.typ, Bytes: f.der}), 0o600); err != nil {
			return err
		}
	}
	return nil
}

// writeClientCert issues a client certificate from the harness's CA.
func writeClientCert(caCertPath, caKeyPath, certPath, keyPath, cn string, orgs []string) error {
	caPEM, err := os.ReadFile(caCertPath)
	if err != nil {
		return err
	}
	caKeyPEM, err := os.ReadFile(caKeyPath)
	if err != nil {
		return err
	}
	cb, _ := pem.Decode(caPEM)
	kb, _ := pem.Decode(caKeyPEM)
	if cb == nil || kb == nil {
		return fmt.Errorf("cannot decode %s or %s", caCertPath, caKeyPath)
	}
	ca, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return err
	}
	caKey, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: cn, Organization: orgs},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := writeFileAtomic(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return err
	}
	return writeFileAtomic(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
}

func writeServiceAccountKeys(keyPath, pubPath string) error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	if err := writeFileAtomic(keyPath, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		return err
	}
	return writeFileAtomic(pubPath, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o600)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		panic(err)
	}
	return n
}

func randomToken() string {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

func exists(paths ...string) bool {
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			return false
		}
	}
	return true
}

func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
