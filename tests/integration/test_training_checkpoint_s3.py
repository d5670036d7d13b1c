"""A checkpoint folder on object storage (moto's S3 server, threaded, on 127.0.0.1); the local
checkpoint tests are in tests/unit/test_training_checkpoint.py.
"""

from __future__ import annotations

import torch

from platform_lib.training.checkpoint import Checkpointer


def _weights(model) -> dict[str, torch.Tensor]:
    return {k: v.full_tensor().clone() for k, v in model.state_dict().items()}


def _perturb(model) -> None:
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)


def test_checkpoint_folder_on_object_storage(trained, monkeypatch):
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        for key, value in {
            "AWS_ACCESS_KEY_ID": "test",
            "AWS_SECRET_ACCESS_KEY": "test",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": f"http://{host}:{port}",
        }.items():
            monkeypatch.setenv(key, value)
        boto3.client("s3").create_bucket(Bucket="drivetrain-ckpt")
        model, optimizer = trained
        ckpt = Checkpointer("s3://drivetrain-ckpt/run/checkpoints", keep=1)
        weights = _weights(model)
        ckpt.save(1, model, optimizer, {"step": 1})
        ckpt.save(2, model, optimizer, {"step": 2})
        keys = [
            o["Key"]
            for o in boto3.client("s3").list_objects_v2(Bucket="drivetrain-ckpt")["Contents"]
        ]
        assert "run/checkpoints/step-000002/.metadata" in keys
        assert not any("step-000001" in k for k in keys)  # retention on the object store
        assert ckpt.latest() == "s3://drivetrain-ckpt/run/checkpoints/step-000002"
        _perturb(model)
        assert ckpt.load(ckpt.latest(), model, optimizer)["step"] == 2
        assert all(torch.equal(weights[k], v) for k, v in _weights(model).items())
    finally:
        server.stop()
