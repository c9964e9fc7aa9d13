"""Learns a WordPiece vocab or a SentencePiece model from raw text.

A thin wrapper: the program is realformer_tf/app/make_vocab.py (installed as a console
script too, see pyproject.toml); `python make_vocab.py --helpfull` lists its flags."""

import realformer_tf_launch

if __name__ == "__main__":
    realformer_tf_launch.run("make_vocab")
