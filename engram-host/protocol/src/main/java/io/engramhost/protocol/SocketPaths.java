package io.engramhost.protocol;

import io.engramhost.os.Posix;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.util.Map;
import java.util.function.IntFunction;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * Where a daemon listens. The template comes from {@code --socket}, else {@code ENGRAM_HOST_SOCKET},
 * else {@link #defaultTemplate(int, Map)} of the process's effective uid and environment; daemon and
 * client resolve it the same way (docs/protocol.md, "Socket path"). Placeholders: {@code {instance}}
 * (default {@code default}), {@code {device}} and {@code {device_uuid}}. The ready and lock files sit
 * next to the socket, named after it.
 */
public final class SocketPaths {
    public static final String ENV = "ENGRAM_HOST_SOCKET";
    /** The variable that names a user's runtime directory (the default for users other than root). */
    public static final String XDG_RUNTIME_DIR = "XDG_RUNTIME_DIR";
    /** The default template for root (euid 0). */
    public static final String ROOT_TEMPLATE = "/run/engram-host/{instance}.sock";
    public static final String DEFAULT_INSTANCE = "default";
    /** sun_path holds 108 bytes including the terminating NUL. */
    public static final int MAX_PATH_BYTES = 107;

    private static final Pattern PLACEHOLDER = Pattern.compile("\\{([^}]*)}");

    private SocketPaths() {
    }

    /**
     * The template in force for this process: the flag, else the environment variable, else the
     * default for this process's effective uid and {@code env}.
     */
    public static String template(String flag, Map<String, String> env) {
        return template(flag, env, Posix.geteuid());
    }

    /** The template in force for a process of effective uid {@code euid}. */
    public static String template(String flag, Map<String, String> env, int euid) {
        if (flag != null && !flag.isBlank()) {
            return flag;
        }
        String fromEnv = env.get(ENV);
        return fromEnv != null && !fromEnv.isBlank() ? fromEnv : defaultTemplate(euid, env);
    }

    /**
     * The default template: {@code /run/engram-host/{instance}.sock} for euid 0; for any other user
     * {@code $XDG_RUNTIME_DIR/engram-host/{instance}.sock} when {@code XDG_RUNTIME_DIR} is an absolute
     * path, else {@code /tmp/engram-host-<euid>/{instance}.sock}. An {@code XDG_RUNTIME_DIR} holding
     * a brace cannot be part of a template and counts as unset.
     */
    public static String defaultTemplate(int euid, Map<String, String> env) {
        if (euid == 0) {
            return ROOT_TEMPLATE;
        }
        String xdg = env.get(XDG_RUNTIME_DIR);
        if (xdg != null && xdg.startsWith("/") && xdg.indexOf('{') < 0 && xdg.indexOf('}') < 0) {
            int end = xdg.length();
            while (end > 1 && xdg.charAt(end - 1) == '/') {
                end--;
            }
            String dir = end == 1 ? "" : xdg.substring(0, end);
            return dir + "/engram-host/{instance}.sock";
        }
        return "/tmp/engram-host-" + Integer.toUnsignedString(euid) + "/{instance}.sock";
    }

    /**
     * Fills the placeholders. {@code device} may be null when the template does not use it;
     * {@code uuidOfDevice} is asked only when {@code {device_uuid}} appears.
     */
    public static Path resolve(String template, String instance, Integer device, IntFunction<String> uuidOfDevice) {
        String inst = instance == null || instance.isBlank() ? DEFAULT_INSTANCE : instance;
        if (!inst.matches("[A-Za-z0-9._-]+")) {
            throw new IllegalArgumentException("--instance '" + inst + "' may hold only letters, digits, '.', '_' and '-'");
        }
        Matcher m = PLACEHOLDER.matcher(template);
        StringBuilder out = new StringBuilder();
        while (m.find()) {
            String value = switch (m.group(1)) {
                case "instance" -> inst;
                case "device" -> String.valueOf(requireDevice(template, device, "{device}"));
                case "device_uuid" -> uuidOfDevice.apply(requireDevice(template, device, "{device_uuid}"));
                default -> throw new IllegalArgumentException("socket template '" + template + "': unknown placeholder {"
                        + m.group(1) + "}; known: {instance}, {device}, {device_uuid}");
            };
            m.appendReplacement(out, Matcher.quoteReplacement(value));
        }
        m.appendTail(out);
        String path = out.toString();
        if (!path.startsWith("/")) {
            throw new IllegalArgumentException("socket path '" + path + "' must be absolute");
        }
        if (path.getBytes(StandardCharsets.UTF_8).length > MAX_PATH_BYTES) {
            throw new IllegalArgumentException("socket path '" + path + "' is longer than " + MAX_PATH_BYTES
                    + " bytes, the limit of a Unix socket address");
        }
        return Path.of(path);
    }

    /**
     * A client's socket, and what to say about it (null: nothing): the path of {@link #template} and
     * {@link #resolve}; but when that path is a non-root user's own default (no flag, no {@value #ENV}), nothing is
     * there, and the system daemon's path ({@value #ROOT_TEMPLATE}) holds something, that path, with a line saying so;
     * and when that user may not search the system daemon's directory, its own default, with a line saying what root's
     * daemon needs to serve it.
     */
    public record ClientSocket(Path path, String note) {
    }

    /** {@link ClientSocket} for a process of effective uid {@code euid}. */
    public static ClientSocket forClient(String flag, Map<String, String> env, int euid, String instance,
            Integer device, IntFunction<String> uuidOfDevice) {
        String template = template(flag, env, euid);
        Path own = resolve(template, instance, device, uuidOfDevice);
        boolean ownDefault = euid != 0 && (flag == null || flag.isBlank())
                && (env.get(ENV) == null || env.get(ENV).isBlank());
        if (!ownDefault || Files.exists(own, LinkOption.NOFOLLOW_LINKS)) {
            return new ClientSocket(own, null);
        }
        Path system = resolve(ROOT_TEMPLATE, instance, device, uuidOfDevice);
        if (!Files.exists(system, LinkOption.NOFOLLOW_LINKS)) {
            // neither there nor surely absent: this uid may not search the system daemon's directory (EACCES), so
            // whether root's daemon serves this node cannot be told; its own default stays, and the note says why
            return new ClientSocket(own, Files.notExists(system, LinkOption.NOFOLLOW_LINKS) ? null
                    : systemUnreachable(own, system, euid));
        }
        return new ClientSocket(system, "no daemon socket at " + own + " (this user's default): using the system"
                + " daemon's " + system + " (--socket or " + ENV + " chooses another)");
    }

    /**
     * The note of a user's client that found no socket at its own default {@code own} and may not look for the
     * system daemon's {@code system}: what root's daemon needs to serve it (the same two fixes as a refused connect's).
     */
    static String systemUnreachable(Path own, Path system, int euid) {
        Path dir = system.getParent();
        return "no daemon socket at " + own + " (this user's default), and uid " + euid + " may not search " + dir
                + " for the system daemon's " + system + ": if root's daemon serves this node, it must admit uid " + euid
                + " (serve --allow-uid " + euid + ") and " + dir + " must let it search (chmod o+x " + dir
                + "); --socket or " + ENV + " chooses another";
    }

    private static int requireDevice(String template, Integer device, String placeholder) {
        if (device == null) {
            throw new IllegalArgumentException("socket template '" + template + "' uses " + placeholder
                    + " but no --device was given");
        }
        return device;
    }

    public static Path readyFile(Path socket) {
        return socket.resolveSibling(socket.getFileName() + ".ready");
    }

    public static Path lockFile(Path socket) {
        return socket.resolveSibling(socket.getFileName() + ".lock");
    }
}
