"""The real-model zoo of tests/routes/test_real_models.py: architectures users bring, each
built by its own library (transformers, torchvision, timm, torch.nn) from a tiny config with
seeded random weights (nothing downloaded).  ``ZOO`` maps a key to a function of no
arguments returning ``(model, example_args)``: the model in eval mode and float32, as a user
hands it over.  Import it after ``pytest.importorskip("torch")``.

``libraries()`` imports transformers, timm and torchvision (None for any that is missing).
The torchvision wheels on PyPI are built against a CUDA torch: beside torch's CPU build their
compiled ops (``torchvision/_C.so``) do not load, and torchvision's ``__init__`` then fails
on the one fake-tensor registration it does not guard (``torchvision::nms``, ``qnms``), which
also breaks ``import transformers`` and ``import timm`` (both import torchvision when it is
installed).  When the library does not load, the two schemas are declared first
(engine.targets.prepare_torchvision, as the command does for a user's factory file; never
called: the models here use no detection op), so that the pure-Python model classes
import.  transformers also imports a package named ``kernels``, which this repository's
folder of that name shadows when the tests run from its root: it is imported first with
the root off sys.path."""

from __future__ import annotations

import importlib.util
import os
import sys
import warnings

import torch

from roundoff_coverage.engine.targets import prepare_torchvision

_LIBRARIES: dict = {}


def _import_beside_repository(name):
    """Import the installed package ``name`` with the repository root off sys.path: run
    from the root (``python -m pytest``), this project's folders (kernels/, formats/...) are
    importable by their bare names and would shadow packages of the same name, such as the
    ``kernels`` package transformers requires."""
    root = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    saved = list(sys.path)
    sys.path[:] = [p for p in sys.path if os.path.realpath(p or os.getcwd()) != root]
    try:
        importlib.import_module(name)
    except ImportError:
        pass
    finally:
        sys.path[:] = saved


def libraries() -> dict:
    """{"transformers": module or None, "timm": ..., "torchvision": ...}."""
    if not _LIBRARIES:
        prepare_torchvision()
        if "kernels" not in sys.modules:
            _import_beside_repository("kernels")
        for name in ("torchvision", "transformers", "timm"):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    _LIBRARIES[name] = importlib.import_module(name)
            except ImportError:
                _LIBRARIES[name] = None
        tf = _LIBRARIES["transformers"]
        if tf is not None:
            tf.logging.set_verbosity_error()      # config warnings about unused token ids
    return _LIBRARIES


VOCAB, SEQ, BATCH = 40, 6, 2


def _ids(seed=1, vocab=VOCAB):
    return torch.randint(0, vocab, (BATCH, SEQ), generator=torch.Generator().manual_seed(seed))


def image(size=32, seed=2, batch=1):
    return torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(seed))


def _seeded(build):
    """``build`` run with torch's global generator seeded (the libraries draw their initial
    weights from it), the model in eval mode: (model, args) or (model, args, kwargs)."""
    def make():
        torch.manual_seed(0)
        model, *rest = build(libraries())
        return (model.eval(), *rest)
    return make


def gpt2(lib):
    tf = lib["transformers"]
    config = tf.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=VOCAB, n_positions=16,
                           bos_token_id=0, eos_token_id=0)
    return tf.GPT2LMHeadModel(config), (_ids(),)


def llama(lib):
    tf = lib["transformers"]
    config = tf.LlamaConfig(hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                            num_attention_heads=4, num_key_value_heads=2, vocab_size=VOCAB,
                            max_position_embeddings=32, bos_token_id=0, eos_token_id=0,
                            pad_token_id=0)
    return tf.LlamaForCausalLM(config), (_ids(),)


def gpt2_labels(lib):
    """GPT-2 given labels: its loss shifts them, pads them with -100 and ignores those
    (integer words, cross entropy with ignore_index); one label is -100 already."""
    model, (ids,) = gpt2(lib)
    labels = ids.clone()
    labels[0, 2] = -100
    return model, (ids,), {"labels": labels}


def roberta(lib):
    """RoBERTa: positions counted from input_ids by integer arithmetic (ne, cumsum, mul,
    add), token types gathered by them; the second sequence padded with pad_token_id."""
    tf = lib["transformers"]
    config = tf.RobertaConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                              intermediate_size=48, vocab_size=VOCAB,
                              max_position_embeddings=SEQ + 2, pad_token_id=1)
    ids = _ids()
    ids[ids == 1] = 2
    ids[1, SEQ - 2:] = 1
    mask = (ids != 1).long()
    return tf.RobertaModel(config), (ids, mask)


def bart(lib):
    """BART: decoder inputs shifted from input_ids (slice_scatter of words, a start token,
    -100 replaced by the pad id)."""
    tf = lib["transformers"]
    config = tf.BartConfig(d_model=32, encoder_layers=1, decoder_layers=1,
                           encoder_attention_heads=2, decoder_attention_heads=2,
                           encoder_ffn_dim=48, decoder_ffn_dim=48, vocab_size=VOCAB,
                           max_position_embeddings=16)
    return tf.BartModel(config), (_ids(),)


def gpt2_classifier(lib):
    """GPT-2 for sequence classification: the logits of each sequence's last token before
    its padding (an integer argmax over the ids, then indexing by it)."""
    tf = lib["transformers"]
    config = tf.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=VOCAB, n_positions=16,
                           pad_token_id=0, num_labels=3)
    ids = _ids()
    ids[ids == 0] = 1
    ids[1, SEQ - 2:] = 0
    return tf.GPT2ForSequenceClassification(config), (ids,)


def bert(lib):
    tf = lib["transformers"]
    config = tf.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                           intermediate_size=48, vocab_size=VOCAB, max_position_embeddings=16,
                           type_vocab_size=2)
    mask = torch.ones(BATCH, SEQ, dtype=torch.long)
    mask[1, SEQ - 2:] = 0                          # the second sequence is padded
    types = torch.zeros(BATCH, SEQ, dtype=torch.long)
    types[:, SEQ // 2:] = 1
    return tf.BertModel(config), (_ids(), mask, types)


def vit(lib):
    tf = lib["transformers"]
    config = tf.ViTConfig(image_size=16, patch_size=4, hidden_size=32, num_hidden_layers=2,
                          num_attention_heads=2, intermediate_size=48)
    return tf.ViTModel(config), (image(16, batch=2),)


def swin(lib):
    tf = lib["transformers"]
    config = tf.SwinConfig(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1],
                           num_heads=[2, 2], window_size=4)
    return tf.SwinModel(config), (image(32),)


def resnet18(lib):
    return lib["torchvision"].models.resnet18(num_classes=10), (image(32),)


def mobilenet_v3_small(lib):
    return lib["torchvision"].models.mobilenet_v3_small(num_classes=10), (image(32),)


def timm_vit(lib):
    model = lib["timm"].create_model("vit_tiny_patch16_224", img_size=32, patch_size=8,
                                     embed_dim=32, depth=2, num_heads=2, num_classes=10)
    return model, (image(32),)


def timm_resnet(lib):
    return lib["timm"].create_model("resnet10t", num_classes=10), (image(32),)


def encoder_layer(lib):
    layer = torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
    x = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(3))
    return layer, (x,)


def _sequence(batch_first):
    x = torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(4))
    return x if batch_first else x.transpose(0, 1).contiguous()


def lstm(batch_first):
    def build(lib):
        return (torch.nn.LSTM(8, 12, num_layers=2, batch_first=batch_first),
                (_sequence(batch_first),))
    return build


def gru(batch_first):
    def build(lib):
        return torch.nn.GRU(8, 12, batch_first=batch_first), (_sequence(batch_first),)
    return build


def conv_layers(lib):
    """torch.nn layers whose aten operators copy entries (nearest upsampling, pixel
    shuffle, padding with a value) or normalize by groups, and ReLU6 (hardtanh) on an
    image with entries on its bounds 0 and 6 (where torch passes no gradient)."""
    nn = torch.nn
    model = nn.Sequential(nn.ReLU6(), nn.Conv2d(3, 8, 3), nn.GroupNorm(2, 8), nn.ReLU6(),
                          nn.Upsample(scale_factor=2), nn.PixelShuffle(2),
                          nn.ConstantPad2d((1, 2, 0, 1), -1.0), nn.Conv2d(2, 3, 3))
    x = image(8)
    x[0, 0, :2] = 0.0
    x[0, 1, :2] = 6.0
    return model, (x,)


def lstm_bidirectional(lib):
    return (torch.nn.LSTM(8, 12, bidirectional=True, batch_first=True),
            (_sequence(True),))


# key -> (library it needs, builder)
_BUILDERS = {
    "gpt2": ("transformers", gpt2), "gpt2-labels": ("transformers", gpt2_labels),
    "roberta": ("transformers", roberta), "bart": ("transformers", bart),
    "gpt2-classifier": ("transformers", gpt2_classifier),
    "llama": ("transformers", llama),
    "bert": ("transformers", bert), "vit": ("transformers", vit),
    "swin": ("transformers", swin),
    "resnet18": ("torchvision", resnet18),
    "mobilenet_v3_small": ("torchvision", mobilenet_v3_small),
    "timm-vit": ("timm", timm_vit), "timm-resnet": ("timm", timm_resnet),
    "encoder-layer": (None, encoder_layer),
    "lstm-batch-first": (None, lstm(True)), "lstm": (None, lstm(False)),
    "gru-batch-first": (None, gru(True)), "gru": (None, gru(False)),
    "lstm-bidirectional": (None, lstm_bidirectional), "conv-layers": (None, conv_layers),
}

ZOO = {key: _seeded(build) for key, (_, build) in _BUILDERS.items()}


def needs(key) -> str | None:
    """The library model ``key`` is built by (None for torch.nn)."""
    return _BUILDERS[key][0]
