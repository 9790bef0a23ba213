/**
 * NUMA for engram-host: the machine's {@link io.engramhost.numa.Topology} read from sysfs, memory
 * policies ({@link io.engramhost.numa.NumaPolicy}, parsed from the CLI by
 * {@link io.engramhost.numa.PolicySpec}), applying them to a mapping before its first touch
 * ({@link io.engramhost.numa.Numa}), checking where pages landed ({@link io.engramhost.numa.Placement})
 * and refusing, before anything is allocated, a table that cannot fit ({@link io.engramhost.numa.MemoryBudget}).
 */
package io.engramhost.numa;
