"""A PyTorch Lightning model trained with precision="bf16-mixed" on the CPU:
Lightning's own autocast handling, the recommended way."""
import lightning as L
import torch


class Regressor(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x).float(), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


torch.manual_seed(0)
data = torch.utils.data.TensorDataset(torch.randn(256, 32), torch.randn(256, 1))
trainer = L.Trainer(accelerator="cpu", devices=1, precision="bf16-mixed", max_epochs=2, logger=False,
                    enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
trainer.fit(Regressor(), torch.utils.data.DataLoader(data, batch_size=32))
print("lightning: trained", trainer.global_step, "steps")
