// The sarama client (IBM/sarama, the other widely used Go Kafka client) against an llog
// broker, driven by tests/test_kafka_go.py: its cluster admin creates a topic of 3
// partitions, an idempotent snappy sync producer writes N keyed records over them, a
// consumer group (range assignor) reads them all and commits; the admin then lists the
// group's committed offsets. One line of stdout per result.
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/IBM/sarama"
)

type handler struct {
	mu   sync.Mutex
	seen int
	n    int
	done chan struct{}
}

func (h *handler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (h *handler) Cleanup(sarama.ConsumerGroupSession) error { return nil }

func (h *handler) ConsumeClaim(s sarama.ConsumerGroupSession, c sarama.ConsumerGroupClaim) error {
	for m := range c.Messages() {
		fmt.Println("record", m.Partition, m.Offset, string(m.Key), string(m.Value))
		s.MarkMessage(m, "")
		h.mu.Lock()
		h.seen++
		if h.seen == h.n {
			s.Commit()
			close(h.done)
		}
		h.mu.Unlock()
	}
	return nil
}

func main() {
	bootstrap, topic, group := os.Args[1], os.Args[2], os.Args[3]
	n, _ := strconv.Atoi(os.Args[4])
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_6_0_0
	cfg.Producer.Return.Successes = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Idempotent = true
	cfg.Net.MaxOpenRequests = 1
	cfg.Producer.Compression = sarama.CompressionSnappy
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.Offsets.AutoCommit.Enable = false
	brokers := []string{bootstrap}

	admin, err := sarama.NewClusterAdmin(brokers, cfg)
	must(err)
	must(admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: 3, ReplicationFactor: 1}, false))
	fmt.Println("created", topic)

	producer, err := sarama.NewSyncProducer(brokers, cfg)
	must(err)
	for i := 0; i < n; i++ {
		_, _, err := producer.SendMessage(&sarama.ProducerMessage{Topic: topic, Partition: int32(i % 3),
			Key: sarama.StringEncoder(fmt.Sprintf("k%d", i)), Value: sarama.StringEncoder(fmt.Sprintf("v%d", i))})
		must(err)
	}
	must(producer.Close())
	fmt.Println("produced", n)

	cg, err := sarama.NewConsumerGroup(brokers, group, cfg)
	must(err)
	h := &handler{n: n, done: make(chan struct{})}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	go func() {
		for ctx.Err() == nil {
			if err := cg.Consume(ctx, []string{topic}, h); err != nil {
				fmt.Fprintln(os.Stderr, "consume:", err)
			}
		}
	}()
	select {
	case <-h.done:
	case <-ctx.Done():
		must(fmt.Errorf("read %d of %d records", h.seen, n))
	}
	cancel()
	must(cg.Close())

	offsets, err := admin.ListConsumerGroupOffsets(group, map[string][]int32{topic: {0, 1, 2}})
	must(err)
	for p := int32(0); p < 3; p++ {
		fmt.Println("committed", p, offsets.GetBlock(topic, p).Offset)
	}
	must(admin.Close())
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
