package io.engramhost.cli;

import io.engramhost.checkpoint.CheckpointGenerator;
import io.engramhost.util.Bytes;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/** {@code generate}: a synthetic checkpoint in the DeepSeek-V4.1 Engram layout. */
@Command(name = "generate", description = "Write a synthetic Engram checkpoint (V4.1 layout: F8_E4M3 weights, "
        + "F8_E8M0 scales).")
final class GenerateCommand implements Callable<Integer> {
    @Option(names = "--out", required = true, paramLabel = "DIR", description = "Directory to write into.")
    Path out;

    @Option(names = "--rows", paramLabel = "N", defaultValue = "100000", description = "Rows per table (default: ${DEFAULT-VALUE}).")
    long rows;

    @Option(names = "--dim", paramLabel = "D", defaultValue = "256",
            description = "Values per row, a multiple of 32 (default: ${DEFAULT-VALUE}).")
    int dim;

    @Option(names = "--layers", paramLabel = "ID", split = ",", defaultValue = "1,14",
            description = "Layer ids (default: ${DEFAULT-VALUE}).")
    List<Integer> layers;

    @Option(names = "--seed", defaultValue = "42", description = "Seed of the pseudo-random bytes (default: ${DEFAULT-VALUE}).")
    long seed;

    @Option(names = "--single-file", description = "One model.safetensors instead of one shard per layer and an index.")
    boolean singleFile;

    @Override
    public Integer call() throws Exception {
        CheckpointGenerator.Spec spec = new CheckpointGenerator.Spec(layers, rows, dim, seed);
        long t0 = System.nanoTime();
        Path written = singleFile ? CheckpointGenerator.writeSingle(out, spec) : CheckpointGenerator.writeSharded(out, spec);
        double s = (System.nanoTime() - t0) / 1e9;
        long bytes = spec.bytesPerLayer() * spec.layers().size();
        System.out.printf("wrote %s: %d layers, %d rows x %d, %s in %.2f s%n", written, spec.layers().size(), rows, dim,
                Bytes.format(bytes), s);
        return 0;
    }
}
