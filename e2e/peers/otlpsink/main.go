// otlpsink is the bench's OTLP/HTTP receiver: it reads every export (POST /v1/traces,
// /v1/metrics), discards it and answers an empty ExportServiceResponse (an empty protobuf
// message is zero bytes), so that the exporter's cost is measured without a real collector's.
// It prints READY once listening, and the requests and bytes it got per path on SIGTERM/SIGINT.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
)

type counter struct{ reqs, bytes atomic.Int64 }

func main() {
	listen := flag.String("listen", "127.0.0.1:4318", "address to listen on")
	flag.Parse()
	var traces, metrics, other counter
	mux := http.NewServeMux()
	handle := func(c *counter) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			n, _ := io.Copy(io.Discard, r.Body)
			c.reqs.Add(1)
			c.bytes.Add(n)
			w.Header().Set("Content-Type", "application/x-protobuf")
			w.WriteHeader(http.StatusOK)
		}
	}
	mux.HandleFunc("POST /v1/traces", handle(&traces))
	mux.HandleFunc("POST /v1/metrics", handle(&metrics))
	mux.HandleFunc("/", handle(&other))
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	fmt.Println("READY", ln.Addr())
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	<-ctx.Done()
	srv.Shutdown(context.Background())
	fmt.Printf("otlpsink: traces %d requests %d bytes; metrics %d requests %d bytes; other %d requests\n",
		traces.reqs.Load(), traces.bytes.Load(), metrics.reqs.Load(), metrics.bytes.Load(), other.reqs.Load())
}
