import java.nio.file.Path;
import java.util.*;
import java.util.concurrent.CountDownLatch;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.*;
import org.apache.kafka.streams.kstream.*;

/**
 * Kafka Streams' word count against an llog broker, driven by tests/test_kafka_streams.py:
 * {@code BOOTSTRAP INPUT OUTPUT APPLICATION_ID STATE_DIR [GUARANTEE]} (GUARANTEE: Streams'
 * processing.guarantee, at_least_once by default, or exactly_once_v2).
 * Counts the words of INPUT's values (a repartition topic and a compacted changelog, both
 * created by Streams), writes each word's running count (a long) to OUTPUT keyed by the
 * word, prints "running" once the application runs, and stops when stdin closes.
 */
public class StreamsWordCount {
    public static void main(String[] args) throws Exception {
        Properties p = new Properties();
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, args[3]);
        p.put(StreamsConfig.STATE_DIR_CONFIG, Path.of(args[4]).toString());
        p.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        p.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 500);
        if (args.length > 5) p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, args[5]);
        p.put(StreamsConfig.consumerPrefix("auto.offset.reset"), "earliest");
        StreamsBuilder builder = new StreamsBuilder();
        builder.<String, String>stream(args[1])
                .flatMapValues(line -> Arrays.asList(line.toLowerCase(Locale.ROOT).split("\\W+")))
                .filter((key, word) -> !word.isEmpty())
                .groupBy((key, word) -> word)
                .count(Materialized.as("counts"))
                .toStream()
                .to(args[2], Produced.with(Serdes.String(), Serdes.Long()));
        CountDownLatch running = new CountDownLatch(1);
        try (KafkaStreams streams = new KafkaStreams(builder.build(), p)) {
            streams.setStateListener((now, before) -> {
                if (now == KafkaStreams.State.RUNNING) running.countDown();
            });
            streams.setUncaughtExceptionHandler(e -> {
                e.printStackTrace();
                return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse
                        .SHUTDOWN_CLIENT;
            });
            streams.start();
            running.await();
            System.out.println("running");
            System.out.flush();
            while (System.in.read() != -1) { }
        }
        System.out.println("stopped");
    }
}
