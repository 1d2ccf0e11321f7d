// Command apiprobe is the in-cluster client of the node smoke tests: from
// inside a Pod it calls the API server the way client-go's in-cluster config
// does (KUBERNETES_SERVICE_HOST/PORT, the projected service-account token,
// the projected CA, certificate verified) and prints one line per request:
//
//	GET PATH -> STATUS [names of the listed items]
//
// With -anonymous it sends no token. Static (CGO_ENABLED=0), so it runs in an
// image with no base. (busybox's wget cannot be given a CA, and its built-in
// TLS fails the handshake with the API server.)
package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

const saDir = "/var/run/secrets/kubernetes.io/serviceaccount"

func main() {
	anonymous := flag.Bool("anonymous", false, "send no token")
	flag.Parse()
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		fmt.Println("error: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be set")
		os.Exit(2)
	}
	ca, err := os.ReadFile(saDir + "/ca.crt")
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(2)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		fmt.Println("error: cannot parse", saDir+"/ca.crt")
		os.Exit(2)
	}
	token := ""
	if !*anonymous {
		t, err := os.ReadFile(saDir + "/token")
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(2)
		}
		token = strings.TrimSpace(string(t))
	}
	client := &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}},
	}
	base := "https://" + net.JoinHostPort(host, port)
	for _, path := range flag.Args() {
		req, _ := http.NewRequest(http.MethodGet, base+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			fmt.Printf("GET %s -> error %v\n", path, err)
			continue
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
		resp.Body.Close()
		var list struct {
			Items []struct {
				Metadata struct{ Name string }
			}
		}
		var names []string
		if json.Unmarshal(body, &list) == nil {
			for _, i := range list.Items {
				names = append(names, i.Metadata.Name)
			}
		}
		fmt.Printf("GET %s -> %d %s\n", path, resp.StatusCode, strings.Join(names, " "))
	}
}
