// kafkajs side of the reassignment tests (tests/reassignment.rs): Kafka's
// AlterPartitionReassignments and ListPartitionReassignments as an admin client sends them.
//
//   node reassign_kafkajs.js alter BOOTSTRAP TOPIC PARTITION REPLICAS   REPLICAS: "2,3,4"
//       prints {"error": null} or {"error": {"type", "message"}} (the partition's Kafka error)
//   node reassign_kafkajs.js list BOOTSTRAP
//       prints {"topics": [{"name", "partitions": [{"partition", "replicas",
//       "addingReplicas", "removingReplicas"}]}]}: the moves under way
// Exits non-zero on anything else.
'use strict'

const { Kafka, logLevel } = require('kafkajs')

async function main() {
  const [cmd, bootstrap, ...rest] = process.argv.slice(2)
  const kafka = new Kafka({
    clientId: 'rill-reassign-test',
    brokers: [bootstrap],
    logLevel: logLevel.NOTHING,
    retry: { retries: 3 },
  })
  const admin = kafka.admin()
  await admin.connect()
  try {
    if (cmd === 'alter') {
      const [topic, partition, replicas] = rest
      const assignment = {
        partition: Number(partition),
        replicas: replicas.split(',').map(Number),
      }
      let error = null
      try {
        await admin.alterPartitionReassignments({
          topics: [{ topic, partitionAssignment: [assignment] }],
          timeout: 30000,
        })
      } catch (e) {
        const inner = (e.errors && e.errors[0]) || e
        error = { type: inner.type || e.type || e.name, message: inner.message || e.message }
      }
      console.log(JSON.stringify({ error }))
    } else if (cmd === 'list') {
      const r = await admin.listPartitionReassignments({ timeout: 30000 })
      console.log(JSON.stringify(r))
    } else {
      throw new Error(`unknown command ${cmd}`)
    }
  } finally {
    await admin.disconnect()
  }
}

main().catch(e => {
  console.error(e)
  process.exit(1)
})
