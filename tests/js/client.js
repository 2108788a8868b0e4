// kafkajs against an llog broker, driven by tests/test_kafka_js.py: its admin creates a
// topic of 2 partitions, a producer (gzip, idempotent) writes N keyed records over them,
// a consumer group reads them all and commits; the group's committed offsets are printed.
// One line of stdout per result.
const { Kafka, CompressionTypes, logLevel } = require("kafkajs");

async function main() {
  const [bootstrap, topic, group, count] = process.argv.slice(2);
  const n = Number(count);
  const kafka = new Kafka({ clientId: "llog-test", brokers: [bootstrap], logLevel: logLevel.ERROR });
  const admin = kafka.admin();
  await admin.connect();
  await admin.createTopics({ topics: [{ topic, numPartitions: 2 }], waitForLeaders: true });
  console.log("created", topic);

  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
  await producer.connect();
  const messages = [];
  for (let i = 0; i < n; i++) messages.push({ key: `k${i}`, value: `v${i}`, partition: i % 2 });
  await producer.send({ topic, compression: CompressionTypes.GZIP, messages });
  await producer.disconnect();
  console.log("produced", n);

  const consumer = kafka.consumer({ groupId: group });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  let seen = 0;
  await new Promise((resolve, reject) => {
    consumer.run({
      eachMessage: async ({ partition, message }) => {
        console.log("record", partition, message.offset, message.key.toString(), message.value.toString());
        seen += 1;
        if (seen === n) resolve();
      },
    }).catch(reject);
  });
  await consumer.commitOffsets([]);  // eachMessage's offsets are committed as it resolves
  await consumer.disconnect();
  for (const p of await admin.fetchOffsets({ groupId: group, topics: [topic] })) {
    for (const o of p.partitions) console.log("committed", o.partition, o.offset);
  }
  await admin.disconnect();
}

main().then(() => process.exit(0), (err) => { console.error("error:", err); process.exit(1); });
