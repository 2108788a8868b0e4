// The franz-go client (and its kadm admin client) against an llog broker, driven by
// tests/test_kafka_go.py: kadm creates a topic of 3 partitions, a zstd producer writes N
// keyed records over them, a consumer group reads them all and commits, kadm reports the
// group's lag. One line of stdout per result.
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

func main() {
	bootstrap, topic, group := os.Args[1], os.Args[2], os.Args[3]
	n, _ := strconv.Atoi(os.Args[4])
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	admin, err := kgo.NewClient(kgo.SeedBrokers(bootstrap))
	must(err)
	adm := kadm.NewClient(admin)
	created, err := adm.CreateTopics(ctx, 3, 1, nil, topic)
	must(err)
	for _, c := range created {
		must(c.Err)
	}
	fmt.Println("created", topic)

	producer, err := kgo.NewClient(kgo.SeedBrokers(bootstrap), kgo.ProducerBatchCompression(kgo.ZstdCompression()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	must(err)
	for i := 0; i < n; i++ {
		r := &kgo.Record{Topic: topic, Partition: int32(i % 3), Key: []byte(fmt.Sprintf("k%d", i)),
			Value: []byte(fmt.Sprintf("v%d", i))}
		must(producer.ProduceSync(ctx, r).FirstErr())
	}
	producer.Close()
	fmt.Println("produced", n)

	// Its log on stderr: a failure shows the group's steps that led to it.
	consumer, err := kgo.NewClient(kgo.SeedBrokers(bootstrap), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(),
		kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgo.LogLevelInfo, nil)))
	must(err)
	seen := 0
	for seen < n {
		fetches := consumer.PollFetches(ctx)
		must(fetches.Err())
		fetches.EachRecord(func(r *kgo.Record) {
			fmt.Println("record", r.Partition, r.Offset, string(r.Key), string(r.Value))
			seen++
		})
	}
	must(consumer.CommitUncommittedOffsets(ctx))
	consumer.Close()

	lag, err := adm.Lag(ctx, group)
	must(err)
	lag.Each(func(l kadm.DescribedGroupLag) {
		for _, m := range l.Lag.Sorted() {
			fmt.Println("lag", m.Partition, m.Commit.At, m.End.Offset, m.Lag)
		}
	})
	admin.Close()
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
