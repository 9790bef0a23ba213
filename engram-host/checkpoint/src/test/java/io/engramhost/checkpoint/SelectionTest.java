package io.engramhost.checkpoint;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.engramhost.util.Bytes;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Optional;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** The three rules of the selection, and a model directory's config.json read strictly. */
class SelectionTest {
    @TempDir
    Path dir;

    /** The Engram tables of layers 1 and 14 (73046 and 73048 rows, 32 values each), an ordinary tensor, and config.json {@code config}. */
    private Path model(String prefix, String config) throws IOException {
        Path m = dir.resolve("m");
        CheckpointGenerator.writeModel(m, new CheckpointGenerator.Model(List.of(1, 14), 36523 * 2L, 32, 1, prefix,
                false, false));
        if (config != null) {
            Files.writeString(m.resolve("config.json"), config);
        }
        return m;
    }

    private static List<String> names(Selection s) {
        return s.tensors().stream().map(TensorInfo::name).toList();
    }

    private String error(Path m, String config) throws IOException {
        Files.writeString(m.resolve("config.json"), config);
        return assertThrows(CheckpointException.class, () -> Selection.of(Checkpoint.open(m), List.of())).getMessage();
    }

    @Test
    void shouldTakeTheGlobsWhenGivenTheConfigElseAndEverythingOtherwise() throws IOException {
        Path m = model("", null);
        Checkpoint byDir = Checkpoint.open(m);
        Selection config = Selection.of(byDir, List.of());
        assertEquals(Selection.Rule.CONFIG, config.rule());
        List<String> engram = List.of("layers.1.engram.embed.scale", "layers.1.engram.embed.weight",
                "layers.14.engram.embed.scale", "layers.14.engram.embed.weight");
        assertEquals(engram, names(config));
        assertEquals(engram, config.patterns(), "the exact names");
        assertEquals(Optional.empty(), config.warning());
        assertEquals("config.json engram_layer_ids [1, 14]: 4 tensors, " + size(config) + " (layers.1.engram.embed.scale,"
                + " ...)", config.description());
        assertEquals(m.resolve("config.json"), config.config().orElseThrow().file());
        assertEquals(engram, names(Selection.of(Checkpoint.open(m.resolve("model.safetensors.index.json")), List.of())),
                "an index: the config.json beside it");

        Selection globs = Selection.of(byDir, List.of("layers.14.*", "layers.1.engram.embed.weight"));
        assertEquals(Selection.Rule.TABLES, globs.rule());
        assertEquals(List.of("layers.1.engram.embed.weight", "layers.14.engram.embed.scale",
                "layers.14.engram.embed.weight"), names(globs));
        assertEquals(List.of("layers.14.*", "layers.1.engram.embed.weight"), globs.patterns());
        assertTrue(globs.description().startsWith("--tables layers.14.*,layers.1.engram.embed.weight: 3 tensors, "),
                globs.description());

        // one shard: not a model directory, so its config.json is not read
        Checkpoint shard = Checkpoint.open(m.resolve("model-00001-of-00002.safetensors"));
        Selection all = Selection.of(shard, List.of());
        assertEquals(Selection.Rule.ALL, all.rule());
        assertEquals(List.of("*"), all.patterns());
        assertEquals(List.of("layers.1.engram.embed.scale", "layers.1.engram.embed.weight"), names(all));
        assertEquals("every tensor (no --tables, and no config.json naming engram_layer_ids): 2 tensors, "
                + size(all), all.description());
        assertTrue(all.warning().orElseThrow().startsWith("selecting every tensor of the checkpoint (no --tables"),
                all.warning().get());
        // two paths: no model directory either
        assertEquals(Selection.Rule.ALL, Selection.of(Checkpoint.open(m.resolve("model-00001-of-00002.safetensors"),
                m.resolve("model-00002-of-00002.safetensors")), List.of()).rule());
        // a directory without config.json, or one that names no Engram layer
        Files.delete(m.resolve("config.json"));
        assertEquals(Selection.Rule.ALL, Selection.of(Checkpoint.open(m), List.of()).rule());
        Files.writeString(m.resolve("config.json"), "{\"text_config\":{\"hidden_size\":5},\"vocab_size\":3}");
        assertEquals(Selection.Rule.ALL, Selection.of(Checkpoint.open(m), List.of()).rule());
        assertEquals(Selection.Rule.ALL, Selection.ofPatterns(byDir, List.of()).rule(), "patterns alone read no config");
    }

    private static String size(Selection s) {
        return Bytes.format(Checkpoint.totalBytes(s.tensors()));
    }

    @Test
    void shouldFindTheTablesUnderAnyPrefixEndingInADot() throws IOException {
        for (String prefix : List.of("model.", "language_model.model.")) {
            Path m = model(prefix, null);
            Selection s = Selection.of(Checkpoint.open(m), List.of());
            assertEquals(List.of(prefix + "layers.1.engram.embed.scale", prefix + "layers.1.engram.embed.weight",
                    prefix + "layers.14.engram.embed.scale", prefix + "layers.14.engram.embed.weight"), names(s));
            for (Path p : Files.list(m).toList()) {
                Files.delete(p);
            }
        }
        // a name that merely ends alike is not under a prefix ending in '.'
        Path m = dir.resolve("x");
        new SafetensorsWriter().add("xlayers.1.engram.embed.weight", DType.U8, new long[] {1, 32}, new byte[32])
                .add("layers.1.engram.embed.scale", DType.U8, new long[] {1, 1}, new byte[1]).write(
                        Files.createDirectories(m).resolve("a.safetensors"));
        assertEquals(m.resolve("config.json") + ": engram_layer_ids names layer 1 but the checkpoint has no tensor"
                + " layers.1.engram.embed.weight (under any prefix ending in '.'): serve the files this config.json"
                + " belongs to, or choose the tables with --tables", error(m, "{\"engram_layer_ids\":[1]}"));
    }

    @Test
    void shouldRefuseTwoTensorsForOneNameAndAMissingLayer() throws IOException {
        Path m = model("", null);
        new SafetensorsWriter().add("mtp.layers.14.engram.embed.weight", DType.U8, new long[] {1}, new byte[1])
                .write(m.resolve("extra.safetensors"));
        Files.delete(m.resolve("model.safetensors.index.json")); // the directory is then every *.safetensors in it
        assertEquals(m.resolve("config.json") + ": layer 14: two tensors are named layers.14.engram.embed.weight under"
                + " different prefixes, 'layers.14.engram.embed.weight' and 'mtp.layers.14.engram.embed.weight': choose"
                + " the tables with --tables", error(m, "{\"engram_layer_ids\":[1,14]}"));
        Files.delete(m.resolve("extra.safetensors"));
        assertTrue(error(m, "{\"engram_layer_ids\":[1,2]}").startsWith(m.resolve("config.json")
                + ": engram_layer_ids names layer 2 but the checkpoint has no tensor layers.2.engram.embed.weight"));
        assertEquals(List.of("layers.1.engram.embed.scale", "layers.1.engram.embed.weight"),
                names(Selection.of(Checkpoint.open(m), List.of("layers.1.*"))), "--tables: the config is not read");
    }

    @Test
    void shouldCheckTheShapesAgainstTheConfigsEngramFields() throws IOException {
        Path m = model("", null);
        String cfg = m.resolve("config.json").toString();
        // what the generator wrote: rows 73046 and 73048, head dim 32, in text_config
        assertEquals(Selection.Rule.CONFIG, Selection.of(Checkpoint.open(m), List.of()).rule());
        assertEquals(cfg + ": engram_num_embeddings[1] is 73049 but layers.14.engram.embed.weight has 73048 rows",
                error(m, "{\"text_config\":{\"engram_layer_ids\":[1,14],\"engram_num_embeddings\":[73046,73049]}}"));
        assertEquals(cfg + ": engram_num_embeddings[0] is 73048 but layers.1.engram.embed.weight has 73046 rows",
                error(m, "{\"engram_layer_ids\":[1,14],\"engram_num_embeddings\":[73048,73048]}"));
        assertEquals(cfg + ": engram_head_dim is 128 but layers.1.engram.embed.weight is F8_E4M3 [73046, 32], not"
                + " [rows, 128]", error(m, "{\"engram_layer_ids\":[1,14],\"engram_head_dim\":128}"));
        // the layers in another order: num_embeddings follows engram_layer_ids
        assertEquals(cfg + ": engram_num_embeddings[0] is 73046 but layers.14.engram.embed.weight has 73048 rows",
                error(m, "{\"engram_layer_ids\":[14,1],\"engram_num_embeddings\":[73046,73048]}"));
        // the scale's columns: head dim / 32
        Path s = dir.resolve("s");
        new SafetensorsWriter().add("layers.3.engram.embed.weight", DType.F8_E4M3, new long[] {2, 64}, new byte[128])
                .add("layers.3.engram.embed.scale", DType.F8_E8M0, new long[] {2, 4}, new byte[8])
                .write(Files.createDirectories(s).resolve("a.safetensors"));
        assertEquals(s.resolve("config.json") + ": engram_head_dim is 64 but layers.3.engram.embed.scale is F8_E8M0"
                + " [2, 4], not [rows, 2] (one scale per 32 values)",
                error(s, "{\"engram_layer_ids\":[3],\"engram_head_dim\":64,\"engram_num_embeddings\":[2]}"));
        // the top level wins over text_config, and the other fields come from the same object
        Files.writeString(m.resolve("config.json"), "{\"engram_layer_ids\":[14],\"text_config\":{\"engram_layer_ids\":[1],"
                + "\"engram_head_dim\":128}}");
        assertEquals(List.of("layers.14.engram.embed.scale", "layers.14.engram.embed.weight"),
                names(Selection.of(Checkpoint.open(m), List.of())));
    }

    @Test
    void shouldRefuseAConfigThatIsNotJsonOrHasFieldsOfTheWrongType() throws IOException {
        Path m = model("", null);
        String cfg = m.resolve("config.json").toString();
        String fix = ": fix the model's config.json, or choose the tables with --tables";
        assertEquals(cfg + ": not JSON: at byte 1: unexpected end of input, expected a string key" + fix, error(m, "{"));
        assertEquals(cfg + ": not a JSON object but a list" + fix, error(m, "[]"));
        assertEquals(cfg + ": text_config is the string \"x\", not an object" + fix, error(m, "{\"text_config\":\"x\"}"));
        assertEquals(cfg + ": engram_layer_ids is the string \"1,14\", not a list of distinct non-negative integers" + fix,
                error(m, "{\"engram_layer_ids\":\"1,14\"}"));
        assertEquals(cfg + ": engram_layer_ids[1] is -14, not a list of distinct non-negative integers" + fix,
                error(m, "{\"engram_layer_ids\":[1,-14]}"));
        assertEquals(cfg + ": engram_layer_ids[1] is the number 14.0, not a list of distinct non-negative integers" + fix,
                error(m, "{\"engram_layer_ids\":[1,14.0]}"));
        assertEquals(cfg + ": engram_layer_ids[2] repeats layer 1, not a list of distinct non-negative integers" + fix,
                error(m, "{\"engram_layer_ids\":[1,14,1]}"));
        assertEquals(cfg + ": engram_layer_ids is an empty list: it names no Engram layer" + fix,
                error(m, "{\"engram_layer_ids\":[]}"));
        assertEquals(cfg + ": engram_num_embeddings is an object, not a list of non-negative integers" + fix,
                error(m, "{\"engram_layer_ids\":[1,14],\"engram_num_embeddings\":{}}"));
        assertEquals(cfg + ": engram_num_embeddings[0] is true, not a list of non-negative integers" + fix,
                error(m, "{\"engram_layer_ids\":[1,14],\"engram_num_embeddings\":[true,1]}"));
        assertEquals(cfg + ": engram_num_embeddings has 1 entries but engram_layer_ids has 2: one per layer" + fix,
                error(m, "{\"engram_layer_ids\":[1,14],\"engram_num_embeddings\":[73046]}"));
        assertEquals(cfg + ": engram_head_dim is the string \"64\", not a positive multiple of 32 (one E8M0 scale per 32"
                + " values)" + fix, error(m, "{\"engram_layer_ids\":[1,14],\"engram_head_dim\":\"64\"}"));
        assertEquals(cfg + ": engram_head_dim is 100, not a positive multiple of 32 (one E8M0 scale per 32 values)" + fix,
                error(m, "{\"engram_layer_ids\":[1,14],\"engram_head_dim\":100}"));
        assertEquals(cfg + ": engram_head_dim is 0, not a positive multiple of 32 (one E8M0 scale per 32 values)" + fix,
                error(m, "{\"engram_layer_ids\":[1,14],\"engram_head_dim\":0}"));
        assertTrue(error(m, "{\"engram_layer_ids\":[1],\"engram_layer_ids\":[2]}").contains("duplicate"));
    }
}
