package io.engramhost.cli;

import io.engramhost.checkpoint.CheckpointGenerator;
import io.engramhost.util.Bytes;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.Callable;
import java.util.stream.Stream;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.ParameterException;
import picocli.CommandLine.Spec;

/**
 * {@code generate}: a synthetic checkpoint in the layout DeepSeek-V4.1 is published in (docs/checkpoints.md,
 * "Synthetic checkpoints"): its Engram tables and a config.json that names them, or with {@code --model} the
 * whole model's shape. It writes only into an empty directory, unless {@code --force}, and even then replaces only
 * the files it writes.
 */
@Command(name = "generate", description = "Write a synthetic checkpoint in the published DeepSeek-V4.1 layout "
        + "(layers.L.engram.embed.weight F8_E4M3, .scale F8_E8M0, and a config.json naming them).")
final class GenerateCommand implements Callable<Integer> {
    @Option(names = "--out", required = true, paramLabel = "DIR",
            description = "Directory to write into: a new or empty one (see --force).")
    Path out;

    @Option(names = "--rows", paramLabel = "N", defaultValue = "100000", description = "Rows of the first Engram "
            + "layer's table, at least 1; each later layer has N / 36523 more, as in the real model (default: "
            + "${DEFAULT-VALUE}).")
    long rows;

    @Option(names = "--dim", paramLabel = "D", defaultValue = "256",
            description = "Values per row (engram_head_dim), a multiple of 32 (default: ${DEFAULT-VALUE}).")
    int dim;

    @Option(names = "--layers", paramLabel = "ID", split = ",", defaultValue = "1,14",
            description = "Engram layer ids (default: ${DEFAULT-VALUE}).")
    List<Integer> layers;

    @Option(names = "--seed", defaultValue = "42", description = "Seed of the pseudo-random bytes (default: ${DEFAULT-VALUE}).")
    long seed;

    @Option(names = "--single-file", description = "One model.safetensors instead of shards and an index.")
    boolean singleFile;

    @Option(names = "--model", description = "The whole model's shape: a few ordinary tensors in four shards, each "
            + "Engram layer beside its small Engram weights in the last two, and the index.")
    boolean wholeModel;

    @Option(names = "--prefix", paramLabel = "PREFIX", defaultValue = "",
            description = "Put PREFIX, ending in '.', before every tensor name (e.g. model.).")
    String prefix;

    @Option(names = "--force", description = "Write into a directory that holds files already: the files generate "
            + "writes are replaced, nothing else is removed.")
    boolean force;

    @Spec
    CommandSpec spec;

    @Override
    public Integer call() throws IOException {
        if (rows < 1) {
            throw new ParameterException(spec.commandLine(), "--rows: " + rows + " must be at least 1");
        }
        if (!prefix.isEmpty() && !prefix.endsWith(".")) {
            throw new ParameterException(spec.commandLine(), "--prefix: '" + prefix + "' must end in '.' (e.g. "
                    + prefix + ".)");
        }
        CheckpointGenerator.Model model;
        try {
            model = new CheckpointGenerator.Model(layers, rows, dim, seed, prefix, wholeModel, singleFile);
        } catch (IllegalArgumentException e) {
            throw new ParameterException(spec.commandLine(), e.getMessage());
        }
        List<Path> before = entries();
        if (!before.isEmpty() && !force) {
            throw new IllegalStateException(out + ": already holds " + before.size() + " entries (for example '"
                    + before.get(0).getFileName() + "'): give --out a new or empty directory, or --force to replace"
                    + " the files generate writes (it removes nothing else)");
        }
        long t0 = System.nanoTime();
        CheckpointGenerator.Written written = CheckpointGenerator.writeModel(out, model);
        double s = (System.nanoTime() - t0) / 1e9;
        List<Path> kept = before.stream().filter(p -> !written.files().contains(p)).toList();
        if (!kept.isEmpty()) {
            System.err.printf("engram-host generate: %s also holds %d entries generate did not write (for example"
                    + " '%s'), left as they were%n", out, kept.size(), kept.get(0).getFileName());
        }
        List<Long> perLayer = model.rowsPerLayer();
        long first = perLayer.get(0);
        long last = perLayer.get(perLayer.size() - 1);
        System.out.printf("wrote %s: %s%d Engram layer%s %s of %s rows x %d, %d files, %s in %.2f s%n",
                written.served(), wholeModel ? "the whole model's shape, " : "", perLayer.size(),
                perLayer.size() == 1 ? "" : "s", model.layers(), first == last ? first : first + " to " + last, dim,
                written.files().size(), Bytes.format(written.tensorBytes()), s);
        return 0;
    }

    /** What {@link #out} holds now, by name (none when it does not exist yet). */
    private List<Path> entries() throws IOException {
        if (!Files.exists(out)) {
            return List.of();
        }
        if (!Files.isDirectory(out)) {
            throw new IllegalStateException(out + ": not a directory: give --out a new or empty directory");
        }
        try (Stream<Path> s = Files.list(out)) {
            return s.sorted().toList();
        }
    }
}
