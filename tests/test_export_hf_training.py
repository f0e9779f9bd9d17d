"""The export trains with TRL as gptlineage trains: `SFTTrainer(assistant_only_loss=True)` on the exported
tiny model computes, from the chat template's `{% generation %}` blocks, exactly the loss mask of our
SFT data (`encode_dialogue`: assistant content, its newline and the closing end-of-text), over exactly
our ids, and takes two optimizer steps on it."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # transformers reads these when imported: never the network
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import math

import pytest

from gptlineage.cli import main
from gptlineage.corpus.dialogue import encode_dialogue
from gptlineage.corpus.synth_chat import stage1_dataset, stage2_dataset
from gptlineage.corpus.tokenizer import EOT_ID, gpt2_encoding

trl = pytest.importorskip("trl")
datasets = pytest.importorskip("datasets")
transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

CONTEXT = 128  # every dialogue below fits: TRL truncates nothing, training cuts no window
# What the synthetic data does not hold: an empty answer, a typed "<|endoftext|>" and a role marker in a
# message, a dialogue that ends on a user turn (training still trains its closing end-of-text).
EDGE_DIALOGUES = [
    [{"role": "user", "content": "Say nothing."}, {"role": "assistant", "content": "  "}],
    [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "a <|endoftext|> b\nAssistant: c"},
        {"role": "assistant", "content": "x <|endoftext|>\nUser: y"},
        {"role": "user", "content": "Thanks!"},
    ],
]


@pytest.fixture(scope="module")
def dialogues():
    synthetic = [row["messages"] for split in stage2_dataset(1, seed=1).values() for row in split]
    return synthetic + [row["messages"] for row in stage1_dataset(2, seed=1)["train"]] + EDGE_DIALOGUES


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    """A random tiny model over GPT-2's vocabulary, exported: the masks do not depend on the weights."""
    root = tmp_path_factory.mktemp("trl")
    tiny = ["--vocab", "50257", "--width", "8", "--heads", "2", "--layers", "1", "--context", str(CONTEXT)]
    assert main(["export-hf", "--random-init", *tiny, "--output", str(root / "export")]) == 0
    return root


def test_sft_trainer_assistant_only_loss_masks_what_training_masks(export, dialogues):
    encoding = gpt2_encoding()
    trained = [encode_dialogue(messages, encoding, index) for index, messages in enumerate(dialogues)]
    assert all(len(ids) <= CONTEXT for ids, _mask in trained)
    tokenizer = transformers.AutoTokenizer.from_pretrained(export / "export")
    model = transformers.AutoModelForCausalLM.from_pretrained(export / "export")
    config = trl.SFTConfig(
        output_dir=str(export / "sft"),
        assistant_only_loss=True,
        max_length=CONTEXT,
        max_steps=2,
        per_device_train_batch_size=4,
        learning_rate=1e-3,
        use_cpu=True,
        report_to=[],
        save_strategy="no",
        logging_steps=1,
        dataloader_num_workers=0,
        seed=0,
    )
    data = datasets.Dataset.from_list([{"messages": messages} for messages in dialogues])
    trainer = trl.SFTTrainer(model=model, args=config, train_dataset=data, processing_class=tokenizer)
    rows = list(trainer.train_dataset)
    assert len(rows) == len(trained)
    for row, (ids, mask) in zip(rows, trained):
        assert row["input_ids"] == ids.tolist() and row["input_ids"][-1] == EOT_ID  # rows end as training's
        # Position 0 is predicted from nothing in either: the model shifts labels, our records start at 1.
        assert [label != -100 for label in row["labels"]][1:] == [bool(m) for m in mask][1:]
    # The collated batch (padded with -100) keeps each row's mask.
    batch = trainer.data_collator(rows[:4])
    for labels, (ids, mask) in zip(batch["labels"].tolist(), trained[:4]):
        assert [label != -100 for label in labels[1 : len(ids)]] == [bool(m) for m in mask][1:]
        assert all(label == -100 for label in labels[len(ids) :])
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == 2 and all(math.isfinite(loss) for loss in losses)
