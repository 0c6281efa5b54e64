package audit

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"
)

// BenchmarkStoreAppend measures durable records per second and the p50 and p99 time
// an Append waits for its group commit. MCPI_AUDIT_BENCH_DIR picks the file
// system (the default is the test's temporary directory).
func BenchmarkStoreAppend(b *testing.B) {
	for _, writers := range []int{1, 16, 256} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			dir := b.TempDir()
			if base := os.Getenv("MCPI_AUDIT_BENCH_DIR"); base != "" {
				var err error
				if dir, err = os.MkdirTemp(base, "bench-"); err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { os.RemoveAll(dir) })
			}
			s, err := Open(Config{Dir: dir}, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close(context.Background())
			lat := make([][]time.Duration, writers)
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for w := range writers {
				n := b.N / writers
				if w < b.N%writers {
					n++
				}
				wg.Go(func() {
					r := sample(w)
					for range n {
						t0 := time.Now()
						if _, err := s.Append(context.Background(), r); err != nil {
							b.Error(err)
							return
						}
						lat[w] = append(lat[w], time.Since(t0))
					}
				})
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			all := slices.Concat(lat...)
			slices.Sort(all)
			if len(all) > 0 {
				b.ReportMetric(float64(len(all))/elapsed.Seconds(), "records/s")
				b.ReportMetric(float64(all[len(all)/2].Microseconds())/1000, "p50-ms")
				b.ReportMetric(float64(all[len(all)*99/100].Microseconds())/1000, "p99-ms")
			}
		})
	}
}
