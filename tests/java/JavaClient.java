import java.time.Duration;
import java.util.*;
import java.util.concurrent.Future;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.*;

/**
 * The Kafka Java client (kafka-clients) against an llog broker, driven by tests/test_kafka_java.py:
 * {@code produce|consume|member|admin|transactions|throttled BOOTSTRAP ...}, one line of stdout per result.
 */
public class JavaClient {
    public static void main(String[] args) throws Exception {
        String mode = args[0], bootstrap = args[1];
        switch (mode) {
            case "produce" -> produce(bootstrap, args[2], Integer.parseInt(args[3]), args[4], Boolean.parseBoolean(args[5]));
            case "consume" -> consume(bootstrap, args[2], args[3], Integer.parseInt(args[4]));
            case "member" -> member(bootstrap, args[2], args[3], args[4], args[5].equals("-") ? null : args[5],
                    Long.parseLong(args[6]));
            case "admin" -> admin(bootstrap, args[2], Integer.parseInt(args[3]));
            case "transactions" -> transactions(bootstrap, args[2], Integer.parseInt(args[3]), args[4]);
            case "throttled" -> throttled(bootstrap, args[2], Integer.parseInt(args[3]), args[4]);
            default -> throw new IllegalArgumentException(mode);
        }
    }

    static void produce(String bootstrap, String topic, int n, String compression, boolean idempotent) throws Exception {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, compression);
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, Boolean.toString(idempotent));
        p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        try (Producer<String, String> producer = new KafkaProducer<>(p, new StringSerializer(), new StringSerializer())) {
            int partitions = producer.partitionsFor(topic).size();
            List<Future<RecordMetadata>> acks = new ArrayList<>();
            for (int i = 0; i < n; i++) {
                ProducerRecord<String, String> r = new ProducerRecord<>(topic, i % partitions, "k" + i, "v" + i);
                r.headers().add("i", Integer.toString(i).getBytes());
                acks.add(producer.send(r));
            }
            producer.flush();
            for (int i = 0; i < n; i++) {
                RecordMetadata m = acks.get(i).get();
                System.out.println("acked " + i + " " + m.partition() + " " + m.offset());
            }
        }
    }

    /**
     * N records of 1 KiB to TOPIC as client id CLIENT: "acked N" once every one is, then the
     * producer's own account of the broker's throttling ("throttle-time-max MS").
     */
    static void throttled(String bootstrap, String topic, int n, String client) throws Exception {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.CLIENT_ID_CONFIG, client);
        p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        try (Producer<String, String> producer = new KafkaProducer<>(p, new StringSerializer(), new StringSerializer())) {
            List<Future<RecordMetadata>> acks = new ArrayList<>();
            String value = "x".repeat(1024);
            for (int i = 0; i < n; i++) acks.add(producer.send(new ProducerRecord<>(topic, null, value)));
            producer.flush();
            for (Future<RecordMetadata> ack : acks) ack.get();
            System.out.println("acked " + n);
            producer.metrics().forEach((name, metric) -> {
                if (name.name().equals("produce-throttle-time-max") && name.group().equals("producer-metrics"))
                    System.out.println("throttle-time-max " + metric.metricValue());
            });
        }
    }

    static KafkaProducer<String, String> transactional(String bootstrap, String id) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, id);
        p.put(ProducerConfig.LINGER_MS_CONFIG, "1");
        KafkaProducer<String, String> producer = new KafkaProducer<>(p, new StringSerializer(), new StringSerializer());
        producer.initTransactions();
        return producer;
    }

    /**
     * N transactions of 10 records over partitions 0-2 of TOPIC, every other one aborted
     * (after its records reached the broker); then what a read_committed consumer reads
     * ("read P VALUE", in order); then a zombie: an instance whose transaction a newer
     * instance of the same id fences ("zombie fenced CLASS" or "zombie committed").
     */
    static void transactions(String bootstrap, String topic, int n, String id) throws Exception {
        try (KafkaProducer<String, String> producer = transactional(bootstrap, id)) {
            for (int i = 0; i < n; i++) {
                producer.beginTransaction();
                for (int j = 0; j < 10; j++) producer.send(new ProducerRecord<>(topic, j % 3, null, i + "-" + j));
                if (i % 2 == 0) {
                    producer.commitTransaction();
                } else {
                    producer.flush();
                    producer.abortTransaction();
                }
            }
        }
        Properties c = new Properties();
        c.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        c.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        try (Consumer<String, String> consumer = new KafkaConsumer<>(c, new StringDeserializer(), new StringDeserializer())) {
            List<TopicPartition> parts = List.of(new TopicPartition(topic, 0), new TopicPartition(topic, 1),
                    new TopicPartition(topic, 2));
            consumer.assign(parts);
            consumer.seekToBeginning(parts);
            int seen = 0, want = (n + 1) / 2 * 10;
            long deadline = System.currentTimeMillis() + 60_000;
            while (seen < want && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
                    System.out.println("read " + r.partition() + " " + r.value());
                    seen++;
                }
            }
        }
        KafkaProducer<String, String> zombie = transactional(bootstrap, id + "-z");
        zombie.beginTransaction();
        zombie.send(new ProducerRecord<>(topic, 0, null, "zombie"));
        zombie.flush();
        try (KafkaProducer<String, String> fresh = transactional(bootstrap, id + "-z")) {
            fresh.beginTransaction();
            fresh.send(new ProducerRecord<>(topic, 0, null, "fresh"));
            fresh.commitTransaction();
        }
        try {
            zombie.send(new ProducerRecord<>(topic, 0, null, "late"));
            zombie.commitTransaction();
            System.out.println("zombie committed");
        } catch (org.apache.kafka.common.KafkaException e) {
            System.out.println("zombie fenced " + e.getClass().getSimpleName());
        } finally {
            zombie.close(Duration.ZERO);
        }
    }

    static void consume(String bootstrap, String topic, String group, int n) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        try (Consumer<String, String> consumer = new KafkaConsumer<>(p, new StringDeserializer(), new StringDeserializer())) {
            consumer.subscribe(List.of(topic));
            int seen = 0;
            long deadline = System.currentTimeMillis() + 60_000;
            while (seen < n && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
                    Header h = r.headers().lastHeader("i");
                    System.out.println("record " + r.partition() + " " + r.offset() + " " + r.key() + " " + r.value()
                            + " " + (h == null ? "-" : new String(h.value())));
                    seen++;
                }
            }
            consumer.commitSync();
            for (TopicPartition tp : consumer.assignment()) {
                OffsetAndMetadata c = consumer.committed(Set.of(tp)).get(tp);
                System.out.println("committed " + tp.partition() + " " + (c == null ? -1 : c.offset()));
            }
        }
    }

    /**
     * One member of a group with the given assignor (and group.instance.id unless "-"):
     * polls until nothing has come for idleMs since its last record or assignment,
     * committing after every poll and before giving partitions up; prints each record
     * and every assignment change.
     */
    static void member(String bootstrap, String topic, String group, String assignor, String instance, long idleMs) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG, assignor);
        if (instance != null) p.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, instance);
        try (Consumer<String, String> consumer = new KafkaConsumer<>(p, new StringDeserializer(), new StringDeserializer())) {
            long[] last = {0};  // 0: no assignment yet (the idle time counts from the first)
            consumer.subscribe(List.of(topic), new ConsumerRebalanceListener() {
                public void onPartitionsRevoked(Collection<TopicPartition> parts) {
                    consumer.commitSync();
                    System.out.println("revoked " + parts.size());
                }
                public void onPartitionsAssigned(Collection<TopicPartition> parts) {
                    last[0] = System.currentTimeMillis();
                    System.out.println("assigned " + parts.size() + " now " + consumer.assignment().size());
                    System.out.flush();
                }
            });
            long deadline = System.currentTimeMillis() + 120_000;
            while (System.currentTimeMillis() < deadline && (last[0] == 0 || System.currentTimeMillis() - last[0] < idleMs)) {
                ConsumerRecords<String, String> got = consumer.poll(Duration.ofMillis(200));
                for (ConsumerRecord<String, String> r : got) {
                    System.out.println("record " + r.partition() + " " + r.offset() + " " + r.value());
                }
                System.out.flush();
                if (!got.isEmpty()) {
                    last[0] = System.currentTimeMillis();
                    consumer.commitSync();
                }
            }
        }
    }

    static void admin(String bootstrap, String topic, int partitions) throws Exception {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (Admin admin = Admin.create(p)) {
            admin.createTopics(List.of(new NewTopic(topic, partitions, (short) 1))).all().get();
            System.out.println("cluster " + admin.describeCluster().nodes().get().size() + " nodes");
            System.out.println("topics " + new TreeSet<>(admin.listTopics().names().get()));
            TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
            System.out.println("partitions " + d.partitions().size());
        }
    }
}
