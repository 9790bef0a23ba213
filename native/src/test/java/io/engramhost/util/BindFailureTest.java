package io.engramhost.util;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.io.IOException;
import java.net.BindException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import org.junit.jupiter.api.Test;

/** A failed bind is said as the kernel's words then the fix, whichever transport (the JDK's, Netty's epoll) failed. */
class BindFailureTest {
    @Test
    void shouldNameTheFixForABusyPortWhateverTheTransport() throws IOException {
        String fix = "Address already in use: another process listens on that port (ss -ltnp shows which): stop it,"
                + " or give --seed-listen another port";
        try (ServerSocket taken = new ServerSocket(0, 1, InetAddress.getLoopbackAddress());
                ServerSocket second = new ServerSocket()) {
            BindException jdk = org.junit.jupiter.api.Assertions.assertThrows(BindException.class,
                    () -> second.bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), taken.getLocalPort())));
            assertEquals(fix, BindFailure.describe(jdk, "--seed-listen", "--seed-listen"), jdk.toString());
        }
        // Netty's epoll transport: io.netty.channel.unix.Errors$NativeIoException, its call and errno before the words
        IOException epoll = new IOException("bind(..) failed with error(-98): Address already in use");
        assertEquals(fix, BindFailure.describe(epoll, "--seed-listen", "--seed-listen"));
    }

    @Test
    void shouldNameTheAddressFlagForAnAddressNotOfThisMachineAndThePortFlagForAPrivilegedPort() {
        assertEquals("Cannot assign requested address: no interface of this machine has that address (ip -brief"
                + " address lists them): give --metrics-address one of them", BindFailure.describe(
                new IOException("bind(..) failed with error(-99): Cannot assign requested address"), "--metrics-port",
                "--metrics-address"));
        assertEquals("Permission denied: a port below 1024 needs root or CAP_NET_BIND_SERVICE: give --metrics-port a"
                + " port of 1024 or more", BindFailure.describe(new BindException("Permission denied"),
                "--metrics-port", "--metrics-address"));
        assertEquals("Network is unreachable", BindFailure.describe(new IOException("Network is unreachable"), "--a",
                "--b"), "another cause: its words alone");
        assertEquals("IOException", BindFailure.describe(new IOException(), "--a", "--b"), "no words: its type");
        assertEquals("a\\nb", BindFailure.describe(new IOException("a\nb"), "--a", "--b"), "one line");
    }
}
