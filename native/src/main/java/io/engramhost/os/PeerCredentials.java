package io.engramhost.os;

/** SO_PEERCRED of a Unix socket peer: who connected. */
public record PeerCredentials(int pid, int uid, int gid) {
}
